//! A `StripedCounter` counted from a thread's exit: a thread-local value dropped as its
//! thread ends (a runtime kept in a thread-local, dropping the request futures it still
//! holds, each counting itself cancelled) adds to the counter after the thread's other
//! thread-locals are gone. Every such add is counted, none aborts the process, and none
//! is lost to a thread started meanwhile. Its own test binary: an abort would end only it.

use std::cell::RefCell;
use std::sync::Arc;

use tollgate::policy::StripedCounter;

/// Adds 1 to its counter when dropped.
struct CountOnDrop(Arc<StripedCounter>);

impl Drop for CountOnDrop {
    fn drop(&mut self) {
        self.0.add(1);
    }
}

thread_local! {
    static LATE: RefCell<Vec<CountOnDrop>> = const { RefCell::new(Vec::new()) };
}

/// Each thread sets its late adder before it first counts (so the thread-local is dropped
/// after the counter's own per-thread state), counts 1000, and adds once more as it ends.
/// Joined (not scoped: a scope ends before its threads' thread-locals are dropped), so
/// every add is in.
#[test]
fn adds_from_a_thread_local_destructor_are_counted() {
    let counter = Arc::new(StripedCounter::new());
    for _ in 0..4 {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let counter = Arc::clone(&counter);
                std::thread::spawn(move || {
                    LATE.with_borrow_mut(|late| late.push(CountOnDrop(Arc::clone(&counter))));
                    (0..1000).for_each(|_| counter.add(1));
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("a counting thread panicked");
        }
    }
    assert_eq!(counter.get(), 4 * 2 * 1001);
}
