//! [`Index`]: names (clients, endpoints, list entries) and what each maps to, found by
//! comparing a few names inline or through a table probed with the name's fingerprint.

use hashbrown::HashTable;

use super::store::fingerprint;

/// Names (clients or endpoints) and what each maps to. A few names (at most
/// [`FEW`]: a config's endpoints, its client rules) are found by comparing the name with
/// each in turn, which needs no hash at all (an endpoint is not otherwise hashed); more are
/// found through a table hashed by [`fingerprint`]: the hash a check computes for its
/// client anyway (the client's state key), so looking the client up costs no second hash.
#[derive(Debug)]
pub(super) struct Index<V> {
    /// Every name, in insertion order.
    pub(super) entries: Vec<(Box<str>, V)>,
    /// Each name's position in `entries`, by fingerprint (kept whatever the size: it finds
    /// names while the index is built, and at lookups once there are more than [`FEW`]).
    table: HashTable<usize>,
}

/// The most names an [`Index`] looks up by comparing them one by one: a comparison of a name
/// that differs costs a length compare (or two word loads), a hash and a table probe tens
/// of instructions.
pub(super) const FEW: usize = 4;

impl<V> Default for Index<V> {
    fn default() -> Self {
        Index {
            entries: Vec::new(),
            table: HashTable::new(),
        }
    }
}

impl<V> Index<V> {
    /// The value of `name`, whose [`fingerprint`] `hash()` computes if needed (only for an
    /// index of more than [`FEW`] names).
    #[inline]
    pub(super) fn get(&self, name: &str, hash: impl FnOnce() -> u64) -> Option<&V> {
        if self.entries.len() <= FEW {
            return self
                .entries
                .iter()
                .find(|(key, _)| same(key, name))
                .map(|(_, value)| value);
        }
        let &i = self
            .table
            .find(hash(), |&i| same(&self.entries[i].0, name))?;
        Some(&self.entries[i].1)
    }

    /// Whether it holds no name.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value of `name`, inserted by `value()` if absent.
    pub(super) fn get_or_insert_with(&mut self, name: &str, value: impl FnOnce() -> V) -> &mut V {
        let entries = &mut self.entries;
        let entry = self.table.entry(
            fingerprint(name),
            |&i| same(&entries[i].0, name),
            |&i| fingerprint(&entries[i].0),
        );
        let i = *entry
            .or_insert_with(|| {
                entries.push((name.into(), value()));
                entries.len() - 1
            })
            .get();
        &mut entries[i].1
    }
}

/// `a == b`, compared inline for names up to 16 bytes (routes, API keys): a couple of
/// word loads instead of a call to the C library's `memcmp`.
#[inline(always)]
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    // Two (possibly overlapping) words cover the first and last bytes.
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap_or([0; 8]));
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap_or([0; 4]));
    match n {
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        0..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inline comparison agrees with `==` at every length, whichever byte differs.
    #[test]
    fn names_compare_as_strings_do() {
        let base: String = ('a'..='z').chain('A'..='Z').collect();
        for n in 0..=base.len() {
            let a = &base[..n];
            let copy = String::from(a);
            assert!(same(a, &copy), "{n}");
            for i in 0..n {
                let mut b = a.as_bytes().to_vec();
                b[i] = b'-';
                let b = String::from_utf8(b).unwrap();
                assert!(!same(a, &b), "{n} {i}");
            }
            if n > 0 {
                assert!(!same(a, &base[..n - 1]) && !same(&base[..n - 1], a));
            }
        }
    }
}
