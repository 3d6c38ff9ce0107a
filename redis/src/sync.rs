//! [`lock`]: the one way this crate takes a mutex.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, ignoring poisoning: every critical section of the leased store leaves its
/// state consistent at each step (a lease taken, then recorded; a spend, then counted), so
/// a panic inside one cannot leave a broken invariant behind.
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
