//! [`Delay`]: a runtime-independent timer future, driven by one background thread.
//!
//! Futures register `(deadline, waker)` with a process-wide timer thread (started on first
//! use) that sleeps on a condition variable until the earliest deadline and wakes what is
//! due. Works under any executor, or none (a hand-rolled `block_on`). A dropped `Delay`
//! leaves at most one stale registration, which fires once as a harmless spurious wake.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

struct Timer {
    pending: Mutex<Vec<(Instant, Waker)>>,
    wake: Condvar,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let timer: &'static Timer = Box::leak(Box::new(Timer {
            pending: Mutex::new(Vec::new()),
            wake: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("tollgate-timer".into())
            .spawn(move || timer.run())
            // Without a timer thread no Delay could ever complete: a spawn failure at
            // first use is unrecoverable for waiting, as for std's own threads.
            .expect("tollgate: cannot start the timer thread");
        timer
    })
}

impl Timer {
    fn run(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let now = Instant::now();
            let mut i = 0;
            while i < pending.len() {
                if pending[i].0 <= now {
                    pending.swap_remove(i).1.wake();
                } else {
                    i += 1;
                }
            }
            pending = match pending.iter().map(|(at, _)| *at).min() {
                Some(next) => {
                    self.wake
                        .wait_timeout(pending, next.saturating_duration_since(now))
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .wake
                    .wait(pending)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }

    fn register(&self, at: Instant, waker: Waker) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        // A future polled again with the same waker registers once, however often the
        // executor polls it.
        if !pending.iter().any(|(t, w)| *t == at && w.will_wake(&waker)) {
            pending.push((at, waker));
            self.wake.notify_one();
        }
    }
}

/// A future that completes after a duration, on any executor.
///
/// ```
/// use std::time::Duration;
/// use tollgate::policy::Delay;
/// let delay = Delay::new(Duration::from_millis(1));
/// assert!(delay.deadline() > std::time::Instant::now() - Duration::from_secs(1));
/// ```
#[derive(Debug)]
pub struct Delay {
    deadline: Instant,
}

impl Delay {
    /// Completes `duration` from now.
    pub fn new(duration: Duration) -> Delay {
        let now = Instant::now();
        Delay {
            // Beyond what `Instant` can represent: a year is "never" for a rate limit.
            deadline: now
                .checked_add(duration)
                .or_else(|| now.checked_add(Duration::from_secs(86_400 * 365)))
                .unwrap_or(now),
        }
    }

    /// When it completes.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl Future for Delay {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        // Register on every pending poll: the executor may have handed us a new waker.
        // Stale entries only cause spurious wakes.
        timer().register(self.deadline, cx.waker().clone());
        Poll::Pending
    }
}
