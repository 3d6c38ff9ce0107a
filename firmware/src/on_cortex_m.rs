//! The trace on a Cortex-M: `main` checking in a loop while the SysTick exception handler
//! moves the simulated clock on and checks too, then the counts over semihosting.
//!
//! Before the trace, a contention phase: `main` takes permits from [`BULK`], a limiter
//! that admits every check, so each of its checks is a compare-and-swap of the state word,
//! while every SysTick exception takes one too. Most exceptions then land in the middle of
//! one of `main`'s writes: if the 64-bit atomics were portable-atomic's lock-based fallback
//! (what `thumbv7em` gets without `unsafe-assume-single-core`, also with tollgate-core's
//! `critical-section` feature, which portable-atomic applies only to targets without
//! compare-and-swap), the handler would spin for ever on the lock `main` holds, and QEMU
//! would time out.

use core::panic::PanicInfo;

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m_rt::{entry, exception};
use cortex_m_semihosting::debug::{self, EXIT_FAILURE, EXIT_SUCCESS};
use cortex_m_semihosting::hprintln;

use crate::sync::{AtomicU32, Ordering};
use crate::tally::{self, Tally};
use crate::{accept_command, handler_checks_at, END_TICK, EXPECTED_ADMITTED};
use tollgate_core::{Algorithm, Gcra, Limiter, Nanos};

/// Core clock cycles between two SysTick exceptions: 1 ms of the board's 25 MHz (QEMU
/// times SysTick by the host's clock, so how many checks `main` fits in between varies).
const CYCLES_PER_TICK: u32 = 25_000;

/// `main` has not checked at any tick yet.
const NO_TICK: u32 = u32::MAX;

/// The simulated clock, in ticks. Written by the handler only.
static NOW: AtomicU32 = AtomicU32::new(0);
/// The tick of `main`'s latest finished check.
static MAIN_CHECKED: AtomicU32 = AtomicU32::new(NO_TICK);
/// SysTick exceptions that left the clock alone because `main` had not checked yet.
static STALLED: AtomicU32 = AtomicU32::new(0);
/// The handler's checks that admitted a command.
static HANDLER_ADMITTED: AtomicU32 = AtomicU32::new(0);
/// The handler's checks that refused one.
static HANDLER_DENIED: AtomicU32 = AtomicU32::new(0);

/// The contention phase's limiter: one permit per ns with a burst of 2^40, checked at
/// [`BULK_NOW`], so every check is admitted and writes the state word.
static BULK: Limiter<Gcra> = Limiter::new(match Gcra::from_interval(1, 1 << 40) {
    Ok(gcra) => gcra,
    Err(_) => panic!("invalid bulk rate"),
});
/// The one instant the contention phase checks at.
const BULK_NOW: Nanos = Nanos::ZERO;
/// How many permits `main` takes from [`BULK`] in the contention phase.
const BULK_CHECKS: u32 = 50_000;
/// Permits the handler took from [`BULK`].
static BULK_HANDLER: AtomicU32 = AtomicU32::new(0);

/// Takes one permit from [`BULK`] (every exception, whatever the phase), then moves the
/// clock one tick on once `main` has checked at the current one (so every tick sees a
/// check), and checks at the new tick if it is one of the handler's.
#[exception]
fn SysTick() {
    if BULK.check_at(BULK_NOW).allowed {
        BULK_HANDLER.fetch_add(1, Ordering::Relaxed);
    }
    // Relaxed: the handler is NOW's one writer; what main did at `now` is ordered by
    // MAIN_CHECKED's Release / Acquire below.
    let now = NOW.load(Ordering::Relaxed);
    if now == END_TICK {
        return;
    }
    // Acquire: pairs with main's Release store, so main's check at `now` is complete
    // before the clock moves past it.
    if MAIN_CHECKED.load(Ordering::Acquire) != now {
        STALLED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let tick = now + 1;
    NOW.store(tick, Ordering::Relaxed);
    if handler_checks_at(tick) {
        let counter = match accept_command(tick) {
            true => &HANDLER_ADMITTED,
            false => &HANDLER_DENIED,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Starts SysTick, checks at the current tick until the last, then stops it, prints the
/// counts and exits QEMU with the verdict.
#[entry]
fn main() -> ! {
    let Some(mut peripherals) = cortex_m::Peripherals::take() else {
        fail("core peripherals already taken");
    };
    let systick = &mut peripherals.SYST;
    systick.set_clock_source(SystClkSource::Core);
    systick.set_reload(CYCLES_PER_TICK - 1);
    systick.clear_current();
    systick.enable_interrupt();
    systick.enable_counter();

    let mut bulk = 0u32;
    for _ in 0..BULK_CHECKS {
        if BULK.check_at(BULK_NOW).allowed {
            bulk += 1;
        }
    }
    let bulk_handler = BULK_HANDLER.load(Ordering::Relaxed);
    // Every permit either context took is in the state word, none twice, none lost.
    let bulk_used = BULK.algorithm().used(BULK.cell().load(), BULK_NOW);
    hprintln!(
        "contention: main took {} of {} permits, SysTick {} meanwhile; {} recorded",
        bulk,
        BULK_CHECKS,
        bulk_handler,
        bulk_used,
    );
    if bulk != BULK_CHECKS || bulk_handler == 0 {
        fail("contention: main refused, or no SysTick exception during it");
    }
    if bulk_used < u64::from(bulk) + u64::from(bulk_handler) {
        fail("contention: a permit taken was not recorded");
    }

    let (mut main, mut interrupted) = (Tally::default(), 0u32);
    loop {
        // Relaxed: a tick only (the handler is NOW's one writer, and one core runs both).
        let tick = NOW.load(Ordering::Relaxed);
        main.count(accept_command(tick));
        // The handler ran in the middle of this check (a figure for the report: how often
        // the two contexts overlapped on the limiter).
        if NOW.load(Ordering::Relaxed) != tick {
            interrupted += 1;
        }
        // Release: pairs with the handler's Acquire load (the check above is finished
        // before the handler may move the clock past `tick`).
        MAIN_CHECKED.store(tick, Ordering::Release);
        if tick == END_TICK {
            break;
        }
    }
    systick.disable_interrupt();
    systick.disable_counter();

    let handler = Tally {
        admitted: HANDLER_ADMITTED.load(Ordering::Relaxed),
        denied: HANDLER_DENIED.load(Ordering::Relaxed),
    };
    hprintln!(
        "{} ticks, {} of main's checks interrupted by SysTick, {} SysTick exceptions \
         waited for main: main admitted {} denied {}; SysTick admitted {} denied {}; \
         admitted {} of {} expected",
        END_TICK,
        interrupted,
        STALLED.load(Ordering::Relaxed),
        main.admitted,
        main.denied,
        handler.admitted,
        handler.denied,
        main.admitted + handler.admitted,
        EXPECTED_ADMITTED,
    );
    match tally::verify(main, handler) {
        Ok(()) => {
            hprintln!("firmware: ok");
            debug::exit(EXIT_SUCCESS);
            halt()
        }
        Err(failed) => fail(failed),
    }
}

/// Reports `failed` and exits QEMU with a failure status.
fn fail(failed: &str) -> ! {
    hprintln!("firmware: FAILED: {}", failed);
    debug::exit(EXIT_FAILURE);
    halt()
}

/// Waits for ever (after a semihosting exit, on a debugger that did not stop the core).
fn halt() -> ! {
    loop {
        cortex_m::asm::wfi();
    }
}

/// A panic (an overflow, a failed `assert!`) fails the run like a failed check.
#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    hprintln!("firmware: panicked: {}", info);
    debug::exit(EXIT_FAILURE);
    halt()
}
