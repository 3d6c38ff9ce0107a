//! [`client_key`]: the concrete key of a request descriptor, the tollgate client its limit
//! is counted under (the Go service's cache key is likewise the domain and every entry's
//! key and value).

use std::fmt::Write;

/// Writes into `out` (cleared first) the key of the request descriptor `entries` of
/// `domain`: the domain, then each entry's key and value, each as its length in bytes, `:`
/// and its text (`9:mongo_cps8:database5:users`), so that distinct descriptors give
/// distinct keys (`("a_b", "c")` and `("a", "b_c")` differ). Allocates nothing when `out`
/// has the capacity.
pub(crate) fn client_key(domain: &str, entries: &[(&str, &str)], out: &mut String) {
    out.clear();
    push(domain, out);
    for (key, value) in entries {
        push(key, out);
        push(value, out);
    }
}

/// Appends `text`, length-prefixed.
fn push(text: &str, out: &mut String) {
    // Writing to a `String` cannot fail; the length's digits need no allocation of their own.
    let _ = write!(out, "{}:", text.len());
    out.push_str(text);
}
