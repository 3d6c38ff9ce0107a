//! [`Delay`]: a runtime-independent timer future, driven by one background thread.
//!
//! Futures register `(deadline, waker)` with a process-wide timer thread (started on first
//! use) that sleeps on a condition variable until the earliest deadline and wakes what is
//! due. Works under any executor, or none (a hand-rolled `block_on`).
//!
//! Registrations live in a `BTreeMap` keyed by `(deadline, registration id)`:
//!
//! - a pending poll registers in O(log n), or, already registered, swaps the waker in place
//!   (one registration per `Delay` however often it is polled);
//! - a `Delay` that completes or is **dropped** removes its registration (O(log n)), so the
//!   timer holds exactly one entry per live, pending `Delay`: memory is bounded by the live
//!   futures, not by how many were ever created (a dropped `until_ready` on a daily tier
//!   does not linger for a day);
//! - the timer thread takes due entries from the front in deadline order (ties in
//!   registration order) and wakes them **after** releasing its lock, so a waker that polls
//!   or drops a `Delay` inline cannot deadlock. Wakers replaced or removed are likewise
//!   dropped outside the lock.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A registration's key: its deadline, then a unique id (ties fire in registration order).
type Key = (Instant, u64);

/// What the timer's lock guards.
#[derive(Default)]
struct Registrations {
    pending: BTreeMap<Key, Waker>,
    next_id: u64,
}

/// A timer thread and its registrations.
pub(crate) struct Timer {
    state: Mutex<Registrations>,
    wake: Condvar,
}

/// The process-wide timer behind [`Delay::new`].
fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(Timer::start)
}

impl Timer {
    /// A new timer with its own thread. Both live for the rest of the process (the thread
    /// sleeps on the condition variable while nothing is registered).
    fn start() -> &'static Timer {
        let timer: &'static Timer = Box::leak(Box::new(Timer {
            state: Mutex::new(Registrations::default()),
            wake: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("tollgate-timer".into())
            .spawn(move || timer.run())
            // Without a timer thread no Delay could ever complete: a spawn failure at
            // first use is unrecoverable for waiting, as for std's own threads.
            .expect("tollgate: cannot start the timer thread");
        timer
    }

    /// The registrations, ignoring poisoning: every critical section below leaves the map
    /// consistent at each step. The only user code run under the lock is `Waker::clone`
    /// and `will_wake`; wakers are woken and dropped outside it.
    fn lock(&self) -> MutexGuard<'_, Registrations> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(&self) {
        let mut due: Vec<Waker> = Vec::new();
        loop {
            {
                let mut state = self.lock();
                loop {
                    let now = Instant::now();
                    while let Some(entry) = state.pending.first_entry() {
                        if entry.key().0 > now {
                            break;
                        }
                        due.push(entry.remove());
                    }
                    if !due.is_empty() {
                        break;
                    }
                    state = match state.pending.first_key_value() {
                        Some((&(next, _), _)) => {
                            self.wake
                                .wait_timeout(state, next.saturating_duration_since(now))
                                .unwrap_or_else(PoisonError::into_inner)
                                .0
                        }
                        None => self
                            .wake
                            .wait(state)
                            .unwrap_or_else(PoisonError::into_inner),
                    };
                }
            }
            // Outside the lock, in deadline order: a waker may poll (and re-register) or
            // drop a Delay right away.
            for waker in due.drain(..) {
                waker.wake();
            }
            // A burst of simultaneous deadlines must not keep its buffer for ever.
            due.shrink_to(64);
        }
    }

    /// Registers `waker` for `at`, or, if `id` is still registered, makes `waker` the one
    /// woken. Returns the waker it replaced, to be dropped by the caller outside the lock.
    fn register(&self, at: Instant, id: &mut Option<u64>, waker: &Waker) -> Option<Waker> {
        let mut state = self.lock();
        if let Some(current) = id.and_then(|id| state.pending.get_mut(&(at, id))) {
            if current.will_wake(waker) {
                return None;
            }
            return Some(std::mem::replace(current, waker.clone()));
        }
        let new = state.next_id;
        // A u64 of registrations never wraps in practice; wrapping would at worst make two
        // keys of one deadline collide, which `insert` below would then report.
        state.next_id = state.next_id.wrapping_add(1);
        let earliest = state.pending.first_key_value().map(|(&(t, _), _)| t);
        let replaced = state.pending.insert((at, new), waker.clone());
        *id = Some(new);
        // The thread sleeps until the earliest deadline: wake it only if that moved.
        if earliest.is_none_or(|t| at < t) {
            self.wake.notify_one();
        }
        replaced
    }

    /// Removes registration `id` for `at`, if still there (it is gone once fired). Returns
    /// its waker, to be dropped outside the lock.
    fn deregister(&self, at: Instant, id: u64) -> Option<Waker> {
        self.lock().pending.remove(&(at, id))
    }

    /// Registrations currently held.
    #[cfg(test)]
    fn registrations(&self) -> usize {
        self.lock().pending.len()
    }
}

/// Registrations currently held by the process-wide timer (one per live, pending
/// [`Delay`]).
#[cfg(test)]
pub(crate) fn registrations() -> usize {
    timer().registrations()
}

/// A future that completes after a duration, on any executor.
///
/// Holds at most one registration with the timer thread while pending, removed when it
/// completes or is dropped.
///
/// ```
/// use std::time::Duration;
/// use tollgate::wait::Delay;
/// let delay = Delay::new(Duration::from_millis(1));
/// assert!(delay.deadline() > std::time::Instant::now() - Duration::from_secs(1));
/// ```
pub struct Delay {
    deadline: Instant,
    timer: &'static Timer,
    /// Our registration's id (with `deadline`, its key), once registered.
    id: Option<u64>,
}

impl fmt::Debug for Delay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delay")
            .field("deadline", &self.deadline)
            .field("registered", &self.id.is_some())
            .finish()
    }
}

impl Delay {
    /// Completes `duration` from now.
    pub fn new(duration: Duration) -> Delay {
        Delay::on(timer(), duration)
    }

    /// Completes `duration` from now, driven by `timer`.
    fn on(timer: &'static Timer, duration: Duration) -> Delay {
        let now = Instant::now();
        Delay {
            // Beyond what `Instant` can represent: a year is "never" for a rate limit.
            deadline: now
                .checked_add(duration)
                .or_else(|| now.checked_add(Duration::from_secs(86_400 * 365)))
                .unwrap_or(now),
            timer,
            id: None,
        }
    }

    /// When it completes.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Removes our registration, if any.
    fn deregister(&mut self) {
        if let Some(id) = self.id.take() {
            // Dropped here, after the timer's lock is released.
            drop(self.timer.deregister(self.deadline, id));
        }
    }
}

impl Future for Delay {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if Instant::now() >= this.deadline {
            this.deregister();
            return Poll::Ready(());
        }
        // Every pending poll: the executor may have handed us a new waker. Registered
        // already, this only swaps the waker; fired meanwhile (the deadline passed since the
        // check above), it registers anew and the timer wakes us at once.
        let replaced = this.timer.register(this.deadline, &mut this.id, cx.waker());
        drop(replaced);
        Poll::Pending
    }
}

impl Drop for Delay {
    fn drop(&mut self) {
        self.deregister();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::task::Wake;

    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    /// Sends its tag when woken.
    struct Tagged(usize, Mutex<mpsc::Sender<usize>>);
    impl Wake for Tagged {
        fn wake(self: Arc<Self>) {
            let _ = self.1.lock().unwrap().send(self.0);
        }
    }

    fn tagged(tag: usize, tx: &mpsc::Sender<usize>) -> Waker {
        Waker::from(Arc::new(Tagged(tag, Mutex::new(tx.clone()))))
    }

    #[test]
    fn dropped_delays_free_their_registrations() {
        let timer = Timer::start();
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let mut live: Vec<_> = (0..10_000)
            .map(|_| Box::pin(Delay::on(timer, Duration::from_secs(3600))))
            .collect();
        for _ in 0..3 {
            // Polled again and again: still one registration each.
            for d in &mut live {
                assert!(d.as_mut().poll(&mut cx).is_pending());
            }
        }
        assert_eq!(timer.registrations(), 10_000);
        live.truncate(2_500);
        assert_eq!(timer.registrations(), 2_500, "bounded by the live futures");
        drop(live);
        assert_eq!(timer.registrations(), 0, "every dropped Delay deregistered");
    }

    #[test]
    fn wakes_in_deadline_order_and_the_latest_waker() {
        let timer = Timer::start();
        let (tx, rx) = mpsc::channel();
        let ms = Duration::from_millis;
        let mut delays: Vec<_> = [ms(90), ms(30), ms(60), ms(30)]
            .into_iter()
            .map(|d| Box::pin(Delay::on(timer, d)))
            .collect();
        for (tag, d) in delays.iter_mut().enumerate() {
            // Registered first with a waker that must not fire, then re-polled with the
            // right one: the registration's waker is replaced, not duplicated.
            let stale = tagged(100 + tag, &tx);
            assert!(d
                .as_mut()
                .poll(&mut Context::from_waker(&stale))
                .is_pending());
            let waker = tagged(tag, &tx);
            assert!(d
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending());
        }
        assert_eq!(timer.registrations(), 4);
        let order: Vec<usize> = (0..4)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        // Deadline order; the two at 30 ms in registration order.
        assert_eq!(order, [1, 3, 2, 0]);
        assert!(rx.recv_timeout(ms(50)).is_err(), "no stale waker fired");
        assert_eq!(timer.registrations(), 0);
        let waker = Waker::from(Arc::new(Noop));
        for d in &mut delays {
            assert!(d.as_mut().poll(&mut Context::from_waker(&waker)).is_ready());
        }
        assert_eq!(timer.registrations(), 0);
    }

    #[test]
    fn a_waker_that_drops_its_delay_inline_does_not_deadlock() {
        let timer = Timer::start();
        struct DropOnWake(Mutex<Option<Pin<Box<Delay>>>>, mpsc::Sender<()>);
        impl Wake for DropOnWake {
            fn wake(self: Arc<Self>) {
                // Drops the Delay (and so deregisters) from the timer thread itself.
                self.0.lock().unwrap().take();
                let _ = self.1.send(());
            }
        }
        let (tx, rx) = mpsc::channel();
        let owner = Arc::new(DropOnWake(Mutex::new(None), tx));
        let mut delay = Box::pin(Delay::on(timer, Duration::from_millis(5)));
        let waker = Waker::from(Arc::clone(&owner));
        assert!(delay
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        *owner.0.lock().unwrap() = Some(delay);
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(timer.registrations(), 0);
    }
}
