//! Interning of rule and tier names: each distinct name is stored once for the life of the
//! process, so decisions can carry `&'static str` names without reference counting on the
//! hot path. Growth is bounded by the number of distinct names ever configured (a few
//! bytes each), not by traffic.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};

/// Returns the process-wide copy of `name`, leaking it the first time it is seen.
pub(crate) fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let names = NAMES.get_or_init(|| Mutex::new(HashSet::new()));
    // A poisoned set still holds valid names: keep using it.
    let mut names = names.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(existing) = names.get(name) {
        return existing;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::intern;

    #[test]
    fn same_name_same_pointer() {
        let a = intern("burst");
        let b = intern(&String::from("burst"));
        assert!(core::ptr::eq(a, b));
        assert_ne!(intern("daily").as_ptr(), a.as_ptr());
    }
}
