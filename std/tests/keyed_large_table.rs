//! A table past 2 MiB (where Linux builds ask the kernel for transparent huge pages before
//! the bucket array is first written) holds its full capacity and limits every key.

use tollgate::{Gcra, KeyedLimiter, ManualClock};

#[test]
fn a_table_of_several_mebibytes_holds_and_limits_every_key() {
    // 300 000 keys: a 5.8 MB bucket array.
    let n = if cfg!(miri) { 1_000 } else { 300_000 };
    let limiter: KeyedLimiter<u64, Gcra, ManualClock> =
        KeyedLimiter::builder(Gcra::per_second(1).burst(1).build().unwrap())
            .capacity(n)
            .clock(ManualClock::new())
            .build()
            .unwrap();
    assert!(limiter.memory_bytes() <= 20 * n);
    for k in 0..n as u64 {
        assert!(limiter.check(&k).unwrap().allowed, "key {k}");
    }
    assert_eq!(limiter.len(), n);
    for k in 0..n as u64 {
        let decision = limiter.check(&k).unwrap();
        assert!(!decision.allowed, "key {k} again");
        assert_eq!(decision.remaining, 0);
    }
    assert_eq!(limiter.stats().inserts, n as u64);
}
