//! [`client_key`]: the concrete key of a request descriptor, the tollgate client its limit
//! is counted under (the Go service's cache key is likewise the domain and every entry's
//! key and value); [`parse_client_key`], its inverse.

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

/// The domain and entries whose [`client_key`] is `key`: `None` for a key it never writes.
pub(crate) fn parse_client_key(key: &str) -> Option<(String, Vec<(String, String)>)> {
    let (domain, mut rest) = take(key)?;
    let mut entries = Vec::new();
    while !rest.is_empty() {
        let (k, after) = take(rest)?;
        let (v, after) = take(after)?;
        entries.push((k.to_owned(), v.to_owned()));
        rest = after;
    }
    Some((domain.to_owned(), entries))
}

/// The length-prefixed text at the start of `key` ([`push`]'s), and what follows it.
fn take(key: &str) -> Option<(&str, &str)> {
    let colon = key.find(':')?;
    let digits = &key[..colon];
    // The digits `push` writes: no sign, no leading zero but for 0 itself.
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    let len: usize = digits.parse().ok()?;
    let start = colon + 1;
    let end = start.checked_add(len)?;
    Some((key.get(start..end)?, key.get(end..)?))
}
