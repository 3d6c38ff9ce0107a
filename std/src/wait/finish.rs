//! [`finish`]: the blocking form of an operation written once as a future — polled on the
//! calling thread until it completes, which for a future whose every wait blocks (a Redis
//! call made with `Io::Blocking`) or that never waits (an in-process policy's answer) is
//! its first poll.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};

/// Runs `operation` to completion on this thread, with no runtime and no allocation.
///
/// Meant for futures that complete on their first poll: a policy's answer on a store that
/// never waits, or one whose waits block the thread. One that does not is polled again
/// after a yield (never lost), so a future that waits for another thread still completes,
/// but it spins meanwhile: await a future that waits for long on an executor instead.
pub fn finish<F: Future>(operation: F) -> F::Output {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    static WAKER: OnceLock<Waker> = OnceLock::new();
    let waker = WAKER.get_or_init(|| Waker::from(Arc::new(Noop)));
    let mut cx = Context::from_waker(waker);
    let mut operation = pin!(operation);
    loop {
        if let Poll::Ready(output) = operation.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::yield_now();
    }
}
