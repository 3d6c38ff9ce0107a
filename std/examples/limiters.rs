//! The limiters without a policy: one limit (`RateLimiter`) and a limit per key in bounded
//! memory (`KeyedLimiter`). `cargo run -p tollgate --example limiters`
use tollgate::{Gcra, KeyedLimiter, ManualClock, Nanos, RateLimiter};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 100 requests per second with bursts of 10, at a time of your choosing (`check()`
    // reads the clock): the burst, then when to come back.
    let limiter = RateLimiter::new(Gcra::per_second(100).burst(10).build()?);
    let now = Nanos::from_secs(1);
    let burst = (0..11).filter(|_| limiter.check_at(now).allowed).count();
    assert_eq!(burst, 10);
    assert_eq!(limiter.check_at(now).retry_after, Nanos::from_millis(10));

    // 10 per second per client, bursts of 5, at most 100 000 clients, all allocated now.
    let per_client: KeyedLimiter<u64, Gcra, ManualClock> =
        KeyedLimiter::builder(Gcra::per_second(10).burst(5).build()?)
            .capacity(100_000)
            .clock(ManualClock::new())
            .build()?;
    let admitted = (0..10).filter(|_| per_client.check(&42).unwrap().allowed);
    assert_eq!(admitted.count(), 5);
    // 19.2 bytes per client, rounded up to fill one 2 MiB huge page.
    assert!(per_client.memory_bytes() <= 22 * per_client.capacity());
    println!("limiters: every assertion held");
    Ok(())
}
