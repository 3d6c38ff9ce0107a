//! A `static` limiter built in `const` with `tollgate-core` alone: no allocator, no
//! initialisation code, the time passed in (here a tick count). The same code builds for
//! bare metal. `cargo run -p tollgate-core --example static_limiter`
use tollgate_core::{Gcra, Limiter, Nanos};

/// 40 commands per second, bursts of up to 5: an invalid rate is a build error.
const RATE: Gcra = match Gcra::per_second(40).burst(5).build() {
    Ok(gcra) => gcra,
    Err(_) => panic!("invalid rate"),
};
static COMMANDS: Limiter<Gcra> = Limiter::new(RATE);

fn main() {
    let tick_ms = 0; // e.g. a SysTick counter
    let admitted = (0..10)
        .filter(|_| COMMANDS.check_at(Nanos::from_millis(tick_ms)).allowed)
        .count();
    assert_eq!(admitted, 5); // the burst
    println!("static_limiter: {admitted} of 10 admitted at once");
}
