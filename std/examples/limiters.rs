//! The limiters without a policy: one limit (`RateLimiter`) and a limit per key in bounded
//! memory (`KeyedLimiter`). `cargo run -p tollgate --example limiters`
use tollgate::{Gcra, KeyedLimiter, ManualClock, Nanos, RateLimiter, WhenFull};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 100 requests per second with bursts of up to 10.
    let limiter = RateLimiter::new(Gcra::per_second(100).burst(10).build()?);
    let now = Nanos::from_secs(1); // a time of your choosing; `check()` reads the clock
    let admitted = (0..11).filter(|_| limiter.check_at(now).allowed).count();
    assert_eq!(admitted, 10); // the burst
    let denied = limiter.check_at(now);
    assert_eq!(denied.retry_after, Nanos::from_millis(10)); // when to come back

    // 10 per second per client, bursts of 5, at most 100 000 clients remembered.
    let per_client: KeyedLimiter<u64, Gcra, ManualClock> =
        KeyedLimiter::builder(Gcra::per_second(10).burst(5).build()?)
            .capacity(100_000)
            .when_full(WhenFull::Evict)
            .clock(ManualClock::new())
            .build()?;
    let admitted = (0..10)
        .filter(|_| per_client.check(&42).unwrap().allowed)
        .count();
    assert_eq!(admitted, 5);
    // All of its memory was allocated by `build` and never grows.
    assert!(per_client.memory_bytes() <= 20 * per_client.capacity());
    println!("limiters: every assertion held");
    Ok(())
}
