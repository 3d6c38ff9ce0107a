//! The timed loops every runner is made of: a direct loop calling one check closure, a
//! keyed loop replaying a pre-generated key order, and a two-thread driver. Each is generic
//! over the check, so the check inlines into the loop and the only per-op overhead shared by
//! all contenders is the loop itself (and, keyed, one read of the next key).

use crate::Stopwatch;
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// A runner calling `check` `iters` times; the verdict goes through `black_box` so nothing
/// is optimised away.
///
/// ```
/// let mut run = tollgate_bench::loops::direct(|| true);
/// let _elapsed = run(1000);
/// ```
pub fn direct<F>(check: F) -> impl FnMut(u64) -> Duration + Send + 'static
where
    F: Fn() -> bool + Send + 'static,
{
    move |iters| {
        let start = Stopwatch::start();
        for _ in 0..iters {
            black_box(check());
        }
        start.elapsed()
    }
}

/// A runner replaying `order` (cyclically, resuming where the last batch stopped) through
/// `check(&key)`.
///
/// ```
/// use std::sync::Arc;
/// let order: Arc<[u64]> = vec![1, 2, 3].into();
/// let mut run = tollgate_bench::loops::keyed(order, |k: &u64| *k > 0);
/// let _elapsed = run(10);
/// ```
pub fn keyed<K, F>(order: Arc<[K]>, check: F) -> impl FnMut(u64) -> Duration + Send + 'static
where
    K: Send + Sync + 'static,
    F: Fn(&K) -> bool + Send + 'static,
{
    let mut pos = 0usize;
    move |iters| {
        let keys = &*order;
        let start = Stopwatch::start();
        for _ in 0..iters {
            // `pos < keys.len()` always; the branch below wraps it.
            black_box(check(&keys[pos]));
            pos += 1;
            if pos == keys.len() {
                pos = 0;
            }
        }
        start.elapsed()
    }
}

/// A runner starting two threads that each replay their own order through the shared
/// `check` after a common barrier; returns the slower thread's elapsed time for `iters` ops
/// per thread (so ns/op is per-thread latency under contention, comparable to one thread's).
///
/// Always wall-clock time, whatever [`Stopwatch::source`] says: what these cases measure is
/// the cost of the two threads running *at once* (cache-line transfers, CAS retries), which
/// per-thread CPU time would hide whenever the scheduler happens to run them one after the
/// other. They need an otherwise idle machine to mean anything.
///
/// ```
/// use std::sync::Arc;
/// let orders: [Arc<[u64]>; 2] = [vec![1].into(), vec![2].into()];
/// let mut run = tollgate_bench::loops::two_threads(orders, Arc::new(|k: &u64| *k > 0));
/// let _elapsed = run(100);
/// ```
pub fn two_threads<K, F>(
    orders: [Arc<[K]>; 2],
    check: Arc<F>,
) -> impl FnMut(u64) -> Duration + Send + 'static
where
    K: Send + Sync + 'static,
    F: Fn(&K) -> bool + Send + Sync + 'static,
{
    let mut positions = [0usize; 2];
    move |iters| {
        let barrier = Barrier::new(2);
        let results: Vec<(Duration, usize)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..2)
                .map(|t| {
                    let keys = &*orders[t];
                    let check = &*check;
                    let barrier = &barrier;
                    let mut pos = positions[t];
                    scope.spawn(move || {
                        barrier.wait();
                        let start = Instant::now();
                        for _ in 0..iters {
                            black_box(check(&keys[pos]));
                            pos += 1;
                            if pos == keys.len() {
                                pos = 0;
                            }
                        }
                        (start.elapsed(), pos)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        let mut slowest = Duration::ZERO;
        for (t, (elapsed, pos)) in results.into_iter().enumerate() {
            positions[t] = pos;
            slowest = slowest.max(elapsed);
        }
        slowest
    }
}
