//! [`Pattern`]: a descriptor value with wildcards. Each `*` matches any run of characters,
//! the empty one included, wherever it stands (`files/*`, `/api/*/action`, `svc*ep*rpc`),
//! as the Go service's `wildcardMatch` does since it took `*` anywhere.

/// A value holding at least one `*`, split at them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Pattern {
    /// The literal runs between the stars: the first must begin a value, the last end it,
    /// the others occur in order between them. At least two.
    literals: Box<[Box<str>]>,
}

impl Pattern {
    /// The pattern `value` spells, or `None` when it holds no `*` (a literal).
    pub(super) fn new(value: &str) -> Option<Pattern> {
        if !value.contains('*') {
            return None;
        }
        Some(Pattern {
            literals: value.split('*').map(Box::from).collect(),
        })
    }

    /// Whether `value` matches.
    pub(super) fn matches(&self, value: &str) -> bool {
        let [first, middle @ .., last] = &*self.literals else {
            // Not built by `new`; a literal has no stars to match around.
            return false;
        };
        let fixed: usize = self.literals.iter().map(|l| l.len()).sum();
        if value.len() < fixed || !value.starts_with(&**first) || !value.ends_with(&**last) {
            return false;
        }
        // The first and last runs are anchored and cannot overlap (the length check);
        // each middle one is taken at its earliest place, which leaves the most room for
        // those after it.
        let mut rest = &value[first.len()..value.len() - last.len()];
        for literal in middle {
            match rest.find(&**literal) {
                Some(at) => rest = &rest[at + literal.len()..],
                None => return false,
            }
        }
        true
    }
}
