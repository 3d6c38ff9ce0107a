//! Every clock is monotonic under repeated reads and the default ones count Unix time; the
//! manual clock moves only when told, saturates instead of wrapping, and is shared by its
//! clones.

use std::time::Duration;

use tollgate::{Clock, CoarseClock, ManualClock, MonotonicClock, Nanos, TscClock};

fn assert_monotonic(clock: &impl Clock, reads: usize) -> Nanos {
    let first = clock.now();
    let mut last = first;
    for _ in 0..reads {
        let now = clock.now();
        assert!(now >= last, "went back from {last:?} to {now:?}");
        last = now;
    }
    last - first
}

#[test]
fn monotonic_clock_never_goes_back_and_advances() {
    let clock = MonotonicClock::new();
    assert_monotonic(&clock, 100_000);
    let before = clock.now();
    std::thread::sleep(Duration::from_millis(2));
    assert!(clock.now() - before >= Nanos::from_millis(2));
    // Copies share the epoch, so a copy's reading is never below an earlier original one.
    let reading = clock.now();
    let copy = clock;
    assert_eq!(copy.epoch(), clock.epoch());
    assert!(copy.now() >= reading);
}

#[test]
fn tsc_clock_never_goes_back_and_tracks_real_time() {
    let clock = TscClock::new();
    assert_monotonic(&clock, 100_000);
    let before = clock.now();
    std::thread::sleep(Duration::from_millis(5));
    let elapsed = clock.now() - before;
    // Scaled to nanoseconds: at least the sleep (calibration is far better than 50 %).
    assert!(elapsed >= Nanos::from_micros(2_500), "{elapsed:?}");
    // A clone shares the start and calibration.
    let clone = clock.clone();
    assert!(clone.now() >= before);
}

#[test]
fn tsc_clock_on_a_mock_counter_reports_exact_nanoseconds() {
    let (quanta, mock) = quanta::Clock::mock();
    mock.increment(1_000);
    let clock = TscClock::from_quanta(quanta);
    let start = clock.now();
    assert_eq!(clock.now(), start, "the mock counter did not move");
    mock.increment(Duration::from_micros(3));
    assert_eq!(clock.now() - start, Nanos::from_micros(3));
}

/// The default clocks count Unix time (one time base with Redis' `TIME`): each reads within
/// a second of the wall clock.
#[test]
fn default_clocks_read_unix_time() {
    use std::time::{SystemTime, UNIX_EPOCH};
    let wall = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let close = |ours: Nanos| {
        let (before, after) = (wall(), ours.as_u64());
        assert!(
            before.abs_diff(after) < 1_000_000_000,
            "{after} vs wall {before}"
        );
    };
    close(MonotonicClock::new().now());
    close(TscClock::new().now());
    close(CoarseClock::new().now());
}

#[test]
fn coarse_clock_never_goes_back_with_or_without_upkeep() {
    // Without an upkeep thread it falls back to a full clock read.
    let clock = CoarseClock::new();
    assert_monotonic(&clock, 10_000);
    // With one (only one may run per process; another test binary may not start one here).
    if let Ok((clock, _upkeep)) = CoarseClock::with_upkeep(Duration::from_millis(1)) {
        assert_monotonic(&clock, 100_000);
        // The upkeep thread refreshes the cached time (polled, with a generous bound, so a
        // loaded machine cannot make this flaky).
        let before = clock.now();
        let moved = (0..5_000).any(|_| {
            std::thread::sleep(Duration::from_millis(1));
            clock.now() > before
        });
        assert!(moved, "the cached time never moved");
    }
}

#[test]
fn manual_clock_moves_only_when_told_and_is_shared() {
    let clock = ManualClock::new();
    let shared = clock.clone();
    assert_eq!(assert_monotonic(&clock, 1_000), Nanos::ZERO);
    assert_eq!(clock.advance(Nanos::from_secs(2)), Nanos::from_secs(2));
    assert_eq!(shared.now(), Nanos::from_secs(2));
    shared.set(Nanos::from_millis(500));
    assert_eq!(clock.now(), Nanos::from_millis(500));
    // Saturates rather than wrapping.
    clock.set(Nanos::new(u64::MAX - 1));
    assert_eq!(clock.advance(Nanos::from_secs(1)), Nanos::MAX);
    assert_eq!(shared.now(), Nanos::MAX);
    assert_eq!(
        ManualClock::starting_at(Nanos::from_secs(7)).now(),
        Nanos::from_secs(7)
    );
}

#[test]
fn manual_clock_advances_from_many_threads_add_up() {
    let clock = ManualClock::new();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let clock = clock.clone();
            scope.spawn(move || {
                for _ in 0..10_000 {
                    clock.advance(Nanos::new(3));
                }
            });
        }
    });
    assert_eq!(clock.now(), Nanos::new(4 * 10_000 * 3));
}
