//! [`SmallKey`]: a string key stored inline when short, so a table lookup compares it
//! without a second cache miss into the heap.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// Bytes stored inline (client ids, API keys and IP addresses usually fit).
const INLINE: usize = 22;

/// An owned string key: inline up to 22 bytes, boxed beyond. 24 bytes either way.
#[derive(Clone)]
pub(crate) enum SmallKey {
    /// Short keys: the bytes and their length.
    Inline([u8; INLINE], u8),
    /// Long keys.
    Heap(Box<str>),
}

impl SmallKey {
    /// Stores `key`.
    pub(crate) fn new(key: &str) -> SmallKey {
        if key.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..key.len()].copy_from_slice(key.as_bytes());
            SmallKey::Inline(bytes, key.len() as u8)
        } else {
            SmallKey::Heap(Box::from(key))
        }
    }

    /// The key.
    #[inline]
    pub(crate) fn as_str(&self) -> &str {
        match self {
            SmallKey::Inline(bytes, len) => {
                let bytes = &bytes[..usize::from(*len)];
                // SAFETY: `new` copied exactly these `len` bytes from a `&str`, so they are
                // valid UTF-8; the enum's fields are private to this module and never
                // mutated after construction.
                unsafe { std::str::from_utf8_unchecked(bytes) }
            }
            SmallKey::Heap(key) => key,
        }
    }
}

impl Borrow<str> for SmallKey {
    #[inline]
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Hash for SmallKey {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As the `str` it borrows as, so lookups by `&str` find it.
        self.as_str().hash(state)
    }
}

impl PartialEq for SmallKey {
    #[inline]
    fn eq(&self, other: &SmallKey) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for SmallKey {}

impl core::fmt::Debug for SmallKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::SmallKey;
    use std::collections::HashMap;

    #[test]
    fn inline_and_heap_keys_look_up_by_str() {
        assert_eq!(core::mem::size_of::<SmallKey>(), 24);
        let long = "x".repeat(40);
        let mut map = HashMap::new();
        for key in ["", "acct_123", "exactly-twenty-two-b!!", long.as_str()] {
            map.insert(SmallKey::new(key), key.len());
        }
        assert!(matches!(
            SmallKey::new("exactly-twenty-two-b!!"),
            SmallKey::Inline(..)
        ));
        assert!(matches!(SmallKey::new(&long), SmallKey::Heap(..)));
        for key in ["", "acct_123", "exactly-twenty-two-b!!", long.as_str()] {
            assert_eq!(map.get(key), Some(&key.len()));
        }
        assert_eq!(map.get("acct_12"), None);
    }
}
