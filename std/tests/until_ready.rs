//! `until_ready` on the direct and keyed limiters, in real time: a denied check is waited
//! out, a leaky bucket's `delay` is held before resolving, a cost that can never fit (or a
//! key the table refuses) fails at once, and the futures are `Send` (spawnable on a
//! multi-threaded runtime). Lower bounds on the elapsed time only: a loaded machine may
//! take longer, never shorter.

use std::time::{Duration, Instant};

use tollgate::{
    Gcra, InsufficientCapacity, KeyedError, KeyedLimiter, LeakyBucket, Nanos, RateLimiter, WhenFull,
};

/// The next permit of a spent 100-per-second limit is 10 ms away; allow 2 ms of clock skew
/// between the limiter's clock and the timer's.
const AT_LEAST: Duration = Duration::from_millis(8);

fn assert_send<T: Send>(value: T) -> T {
    value
}

#[tokio::test]
async fn direct_until_ready_waits_out_a_deny() {
    let limiter = RateLimiter::new(Gcra::per_second(100).burst(1).build().unwrap());
    assert!(limiter.check().allowed);
    assert!(!limiter.check().allowed);
    let start = Instant::now();
    let decision = assert_send(limiter.until_ready()).await;
    assert!(decision.allowed);
    assert!(start.elapsed() >= AT_LEAST, "{:?}", start.elapsed());
    // It consumed the permit it waited for.
    assert!(!limiter.check().allowed);
}

/// Its result may be ignored without a warning (the wait ends only once admitted): this
/// test does not compile if `until_ready`'s output becomes `#[must_use]` again.
#[deny(unused_must_use)]
#[tokio::test]
async fn direct_until_ready_may_be_ignored() {
    let limiter = RateLimiter::new(Gcra::per_minute(2).build().unwrap());
    limiter.until_ready().await;
    limiter
        .until_ready_with_jitter(tollgate::wait::Jitter::up_to(Duration::from_millis(1)))
        .await;
    assert!(!limiter.check().allowed, "both waits took their permit");
}

#[tokio::test]
async fn direct_until_ready_is_immediate_with_quota_left() {
    let limiter = RateLimiter::new(Gcra::per_minute(1).build().unwrap());
    let decision = limiter.until_ready().await;
    assert!(decision.allowed);
    assert_eq!(decision.remaining, 0);
}

#[tokio::test]
async fn direct_until_n_ready_waits_or_fails_at_once() {
    let limiter = RateLimiter::new(Gcra::per_second(100).burst(3).build().unwrap());
    assert_eq!(limiter.until_n_ready(3).await.unwrap().remaining, 0);
    let start = Instant::now();
    assert!(limiter.until_n_ready(2).await.unwrap().allowed);
    assert!(start.elapsed() >= 2 * AT_LEAST, "{:?}", start.elapsed());
    // Larger than the burst: no wait could help.
    let start = Instant::now();
    assert_eq!(
        limiter.until_n_ready(4).await,
        Err(InsufficientCapacity { max_cost: 3 })
    );
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn direct_until_ready_holds_a_leaky_bucket_delay() {
    // One per 20 ms, two queued behind the one in service.
    let limiter = RateLimiter::new(LeakyBucket::new(1, Nanos::from_millis(20), 2).unwrap());
    assert_eq!(limiter.until_ready().await.delay, Nanos::ZERO);
    let start = Instant::now();
    let queued = limiter.until_ready().await;
    assert!(queued.allowed);
    assert!(queued.delay > Nanos::ZERO);
    assert!(
        start.elapsed() >= queued.delay.as_duration() - Duration::from_millis(2),
        "{:?} < {:?}",
        start.elapsed(),
        queued.delay
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_until_ready_spawns_on_a_multi_threaded_runtime() {
    let limiter = std::sync::Arc::new(RateLimiter::new(
        Gcra::per_second(100).burst(1).build().unwrap(),
    ));
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.until_ready().await })
        })
        .collect();
    let start = Instant::now();
    for task in tasks {
        assert!(task.await.unwrap().allowed);
    }
    // Three permits from a burst of one: the last waited at least two intervals.
    assert!(start.elapsed() >= 2 * AT_LEAST, "{:?}", start.elapsed());
}

#[tokio::test]
async fn keyed_until_key_ready_waits_per_key() {
    let limiter: KeyedLimiter<u64, Gcra> =
        KeyedLimiter::new(Gcra::per_second(100).burst(1).build().unwrap(), 100).unwrap();
    assert!(limiter.check(&1).unwrap().allowed);
    let start = Instant::now();
    // Another key has its own quota: no wait.
    assert!(limiter.until_key_ready(&2).await.unwrap().allowed);
    let decision = assert_send(limiter.until_key_ready(&1)).await.unwrap();
    assert!(decision.allowed);
    assert!(start.elapsed() >= AT_LEAST, "{:?}", start.elapsed());
}

#[tokio::test]
async fn keyed_until_key_n_ready_fails_at_once_when_the_cost_cannot_fit() {
    let limiter: KeyedLimiter<u64, Gcra> =
        KeyedLimiter::new(Gcra::per_second(100).burst(2).build().unwrap(), 100).unwrap();
    assert_eq!(limiter.until_key_n_ready(&1, 2).await.unwrap().remaining, 0);
    let start = Instant::now();
    assert!(limiter.until_key_n_ready(&1, 2).await.unwrap().allowed);
    assert!(start.elapsed() >= 2 * AT_LEAST, "{:?}", start.elapsed());
    assert_eq!(
        limiter.until_key_n_ready(&1, 3).await,
        Err(KeyedError::InsufficientCapacity(InsufficientCapacity {
            max_cost: 2
        }))
    );
}

#[tokio::test]
async fn keyed_until_key_ready_returns_full_at_once() {
    let limiter: KeyedLimiter<u64, Gcra> =
        KeyedLimiter::builder(Gcra::per_minute(1).build().unwrap())
            .capacity(1)
            .when_full(WhenFull::Refuse)
            .build()
            .unwrap();
    assert!(limiter.until_key_ready(&1).await.unwrap().allowed);
    // Key 1 is limited for a minute, so key 2 has no room: refused, not waited on.
    let start = Instant::now();
    assert_eq!(limiter.until_key_ready(&2).await, Err(KeyedError::Full));
    assert!(start.elapsed() < Duration::from_secs(1));
}
