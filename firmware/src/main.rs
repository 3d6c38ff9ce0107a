//! A firmware that rate-limits commands accepted from two contexts at once, an interrupt
//! handler and the main loop, through one `static` limiter: the whole of tollgate a
//! microcontroller needs, to copy into your own project.
//!
//! - The limiter is a `static` built in `const`: no allocator, no initialisation code, no
//!   `unsafe`, 32 bytes of RAM (parameters and one atomic word).
//! - Time comes from a tick count, converted to [`Nanos`] and passed to `check_at`: no clock
//!   trait, no `std`.
//! - A Cortex-M has no 64-bit atomics: with portable-atomic's `unsafe-assume-single-core`
//!   feature (enabled by this binary: the chip has one core), each atomic step on the state
//!   word masks interrupts for a few instructions, so a check may be interrupted by a check
//!   in a handler (its compare-and-swap then fails and retries) but never torn. Without it,
//!   portable-atomic's fallback takes a global lock that is not interrupt-safe: a handler
//!   preempting its holder would spin on it for ever. tollgate-core's `critical-section`
//!   feature does not help here: portable-atomic uses it only on targets without 32-bit
//!   compare-and-swap (thumbv6m), not on this Cortex-M4F.
//!
//! The trace both targets run: a simulated clock of 1 ms ticks, moved on by the SysTick
//! handler (`on_cortex_m.rs`) only once `main` has checked at the current tick, so every
//! tick up to [`END_TICK`] sees at least one check. The handler checks at each odd tick it
//! starts, `main` checks in a loop between ticks. Whoever checks, GCRA then admits exactly
//! [`EXPECTED_ADMITTED`] = burst + elapsed / interval, and each context must have been
//! admitted and refused at least once ([`tally::verify`]).
//!
//! Run it on an emulated Cortex-M4F (QEMU's `mps2-an386` board, `qemu-system-arm` from
//! scripts/setup.sh; the runner is in `.cargo/config.toml`). It prints the counts over
//! semihosting and exits non-zero if an assertion fails; the test command runs it
//! (scripts/stages/firmware-qemu.sh):
//!
//! ```text
//! cargo run -p tollgate-firmware --target thumbv7em-none-eabihf
//! ```
//!
//! On a host it runs the same trace with the handler's checks simulated between the main
//! loop's (`host_simulation.rs`), and asserts the same counts:
//!
//! ```text
//! cargo run -p tollgate-firmware
//! ```
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(not(target_os = "none"))]
mod host_simulation;
#[cfg(target_os = "none")]
mod on_cortex_m;
#[cfg(target_os = "none")]
mod sync;
mod tally;

use tollgate_core::{Gcra, Limiter, Nanos};

/// 40 commands per second (one per 25 ms), bursts of up to 5, validated at compile time:
/// an invalid rate is a build error, not a boot-time panic.
const COMMAND_RATE: Gcra = match Gcra::per_second(40).burst(5).build() {
    Ok(gcra) => gcra,
    Err(_) => panic!("invalid command rate"),
};

/// The limiter both contexts check.
static COMMANDS: Limiter<Gcra> = Limiter::new(COMMAND_RATE);

/// One tick of the simulated clock: 1 ms.
const NS_PER_TICK: u64 = 1_000_000;

/// The last tick of the trace: one second of simulated time.
const END_TICK: u32 = 1_000;

/// What GCRA admits over ticks `0..=END_TICK` with a check at every tick: the burst, then
/// one per emission interval elapsed.
///
/// Exact whichever context checks and in whatever order. Never more: each admission moves
/// the state (the theoretical arrival time) on by one interval `T` and needs it within
/// `(b − 1)·T` of `now`. Never less: the first check is at tick 0 (the handler waits for
/// `main`'s), and from then on a check at every tick finds each admission due at a whole
/// tick (`T` is a whole number of ticks) with the state still ahead of `now`, so none is
/// late and none pushes the next one later. A check at an older tick (one of `main`'s that
/// the handler interrupted) is refused or takes one the newer check left.
const EXPECTED_ADMITTED: u64 = COMMAND_RATE.burst_size()
    + END_TICK as u64 * NS_PER_TICK / COMMAND_RATE.emission_interval().as_u64();

// The figure above is exact only if every admission falls on a tick.
const _: () = assert!(COMMAND_RATE.emission_interval().as_u64() % NS_PER_TICK == 0);

/// Whether the interrupt handler checks at `tick` (`main` checks at every tick).
const fn handler_checks_at(tick: u32) -> bool {
    tick % 2 == 1
}

/// Whether the command received at `tick` may run now.
fn accept_command(tick: u32) -> bool {
    COMMANDS
        .check_at(Nanos::new(u64::from(tick) * NS_PER_TICK))
        .allowed
}

/// On a host: the same trace, simulated.
#[cfg(not(target_os = "none"))]
fn main() {
    host_simulation::main();
}
