//! Waiting: blocking `wait` and runtime-free `until_ready`, the leaky bucket's delay, and
//! dropping a waiting future.

use std::future::{ready, Future};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use tollgate::policy::{Policy, PolicyCheck, Request};
use tollgate::{Clock, ManualClock, Nanos};

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// A minimal executor: poll, park until woken, repeat.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

fn noop_context() -> Context<'static> {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker: &'static Waker = Box::leak(Box::new(Waker::from(Arc::new(Noop))));
    Context::from_waker(waker)
}

const GCRA: &str = "[[rules]]\nname = \"d\"\nlimit = 2\nwindow = \"1s\"\n";
const LEAKY: &str =
    "[[rules]]\nname = \"shaped\"\nlimit = 10\nwindow = \"1s\"\nalgorithm = \"leaky_bucket\"\nqueue = 5\n";

#[test]
fn wait_sleeps_exactly_until_admitted() {
    let clock = ManualClock::new();
    let policy = Policy::from_toml(GCRA, clock.clone()).unwrap();
    let mut slept = Vec::new();
    for _ in 0..4 {
        let d = policy
            .wait_with(&Request::new("c", "/", 1), |d| {
                slept.push(d);
                clock.advance(d);
            })
            .unwrap();
        assert!(d.allowed());
    }
    // Two at once, then one per 500 ms.
    assert_eq!(slept, [Nanos::from_millis(500), Nanos::from_millis(500)]);
    assert_eq!(clock.now(), Nanos::from_secs(1));
    // A cost that can never pass is an error, not an endless wait.
    assert!(policy
        .wait_with(&Request::new("c", "/", 3), |_| {})
        .is_err());
}

#[test]
fn wait_honours_the_leaky_bucket_delay() {
    let clock = ManualClock::new();
    let policy = Policy::from_toml(LEAKY, clock.clone()).unwrap();
    let mut slept = Vec::new();
    for _ in 0..3 {
        policy
            .wait_with(&Request::new("c", "/", 1), |d| {
                slept.push(d);
                clock.advance(d);
            })
            .unwrap();
    }
    // The first goes at once; each later one is held 100 ms after the previous.
    assert_eq!(slept, [Nanos::from_millis(100), Nanos::from_millis(100)]);
}

#[test]
fn until_ready_with_a_manual_timer() {
    let clock = ManualClock::new();
    let policy = Policy::from_toml(GCRA, clock.clone()).unwrap();
    let timer = |d: Nanos| {
        clock.advance(d);
        ready(())
    };
    for _ in 0..5 {
        let d = block_on(policy.until_ready_with(Request::new("c", "/", 1), timer)).unwrap();
        assert!(d.allowed());
    }
    assert_eq!(clock.now(), Nanos::from_millis(1500));
}

#[test]
fn dropping_a_backing_off_future_consumes_nothing() {
    let clock = ManualClock::new();
    let policy = Policy::from_toml(GCRA, clock.clone()).unwrap();
    policy.allow("c", "/", 2).unwrap();
    let before = policy.peek("c", "/", 1).unwrap();
    {
        // A timer that never fires: the future stays pending in back-off.
        let mut fut = pin!(policy.until_ready_with(Request::new("c", "/", 1), |_| {
            std::future::pending::<()>()
        }));
        assert!(fut.as_mut().poll(&mut noop_context()).is_pending());
    }
    assert_eq!(policy.peek("c", "/", 1).unwrap(), before);
}

#[test]
fn dropping_a_delayed_future_refunds_its_permit() {
    let clock = ManualClock::new();
    let policy = Policy::from_toml(LEAKY, clock.clone()).unwrap();
    policy.allow("c", "/", 1).unwrap();
    let before = policy.peek("c", "/", 1).unwrap();
    assert_eq!(before.delay(), Nanos::from_millis(100));
    {
        // Admitted with a 100 ms delay; dropped before forwarding.
        let mut fut = pin!(policy.until_ready_with(Request::new("c", "/", 1), |_| {
            std::future::pending::<()>()
        }));
        assert!(fut.as_mut().poll(&mut noop_context()).is_pending());
        // While it holds the slot, the next request queues behind it.
        assert_eq!(
            policy.peek("c", "/", 1).unwrap().delay(),
            Nanos::from_millis(200)
        );
    }
    assert_eq!(policy.peek("c", "/", 1).unwrap(), before);
}

#[test]
fn until_ready_on_the_real_timer_completes_under_a_hand_rolled_executor() {
    // A real clock and real sleeps of a few milliseconds: asserts completion and the
    // decisions, never a duration.
    let policy = Policy::from_toml(
        "[[rules]]\nname = \"d\"\nlimit = 1\nwindow = \"2ms\"\n",
        tollgate::MonotonicClock::new(),
    )
    .unwrap();
    for _ in 0..3 {
        let d = block_on(policy.until_ready("c", "/", 1)).unwrap();
        assert!(d.allowed());
    }
    assert!(policy.wait("c", "/", 1).unwrap().allowed());
}
