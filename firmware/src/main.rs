//! A firmware that rate-limits commands arriving over a serial line: the whole of
//! tollgate a microcontroller needs, to copy into your own project.
//!
//! - The limiter is a `static` built in `const`: no allocator, no initialisation code, no
//!   `unsafe`, 16 bytes of RAM (parameters and one atomic word).
//! - Time comes from a hardware timer's tick count, converted to [`Nanos`] and passed to
//!   `check_at`: no clock trait, no `std`.
//! - On a chip without 64-bit atomics (this thumbv7em has 32-bit ones only) the state word
//!   goes through `portable-atomic`'s fallback; to check from an interrupt handler, enable
//!   tollgate-core's `critical-section` feature and link a critical-section implementation
//!   from your HAL.
//!
//! Build it for a Cortex-M4F (no hardware needed; the test command does this):
//!
//! ```text
//! cargo build -p tollgate-firmware --target thumbv7em-none-eabihf
//! ```
//!
//! On a host it runs the same logic against a simulated timer and prints what passed:
//!
//! ```text
//! cargo run -p tollgate-firmware
//! ```
#![cfg_attr(target_os = "none", no_std, no_main)]

use tollgate_core::{Gcra, Limiter, Nanos};

/// 50 commands per second, bursts of up to 5, validated at compile time: an invalid rate
/// is a build error, not a boot-time panic.
static COMMANDS: Limiter<Gcra> = Limiter::new(match Gcra::per_second(50).burst(5).build() {
    Ok(gcra) => gcra,
    Err(_) => panic!("invalid command rate"),
});

/// The hardware timer runs at 1 MHz: one tick per microsecond.
const NS_PER_TICK: u64 = 1_000;

/// Whether the command received at timer `tick` may run now.
fn accept_command(tick: u64) -> bool {
    COMMANDS
        .check_at(Nanos::new(tick.saturating_mul(NS_PER_TICK)))
        .allowed
}

#[cfg(target_os = "none")]
mod bare_metal {
    //! The bare-metal entry point: a reset handler polling a timer and a receive flag.

    use core::panic::PanicInfo;
    use core::ptr::read_volatile;

    /// A free-running 32-bit timer counter (the DWT cycle counter's address on Cortex-M;
    /// use your chip's timer).
    const TIMER: *const u32 = 0xE000_1004 as *const u32;

    #[panic_handler]
    fn panic(_: &PanicInfo) -> ! {
        loop {}
    }

    /// The reset entry: count timer wrap-arounds into a 64-bit tick, accept or drop each
    /// command.
    #[no_mangle]
    pub extern "C" fn _start() -> ! {
        let (mut high, mut last) = (0u64, 0u32);
        let mut dropped = 0u32;
        loop {
            // SAFETY: TIMER is a memory-mapped, always-readable 32-bit register.
            let low = unsafe { read_volatile(TIMER) };
            if low < last {
                high += 1 << 32;
            }
            last = low;
            if !super::accept_command(high | u64::from(low)) {
                dropped = dropped.wrapping_add(1);
            }
        }
    }
}

/// On a host: a command every millisecond for one second, then a pause, then another
/// burst, against a simulated timer.
#[cfg(not(target_os = "none"))]
fn main() {
    let mut accepted = 0;
    let arrivals = (0..1_000u64)
        .map(|ms| ms * 1_000)
        .chain((0..10).map(|i| 2_000_000 + i));
    for tick in arrivals {
        if accept_command(tick) {
            accepted += 1;
        }
    }
    // 5 at once, then one every 20 ms for the rest of the first second, then a fresh
    // burst of 5 after the pause.
    println!("accepted {accepted} of 1010 commands");
    assert_eq!(accepted, 5 + 49 + 5);
}
