//! [`HeaderNameError`]: a policy name that cannot be rendered into a rate-limit header.

use std::fmt;

/// A policy name rejected by [`RateLimitHeaders::from_decision`]: empty, or holding a
/// character outside printable ASCII (`' '..='~'`), such as CR, LF, NUL, a tab or any
/// non-ASCII character. Such a character cannot appear in a structured-field string, and
/// CR/LF in a header value would let the name inject headers of its own.
///
/// (Quotes and backslashes are allowed: they are escaped inside the sf-string.)
///
/// [`RateLimitHeaders::from_decision`]: super::RateLimitHeaders::from_decision
///
/// ```
/// use tollgate::policy::RateLimitHeaders;
/// use tollgate::{Decision, Nanos};
/// let d = Decision::allow(10, 9, Nanos::ZERO);
/// let err = RateLimitHeaders::from_decision("a\r\nSet-Cookie: x", 10, Nanos::from_secs(1), &d)
///     .unwrap_err();
/// assert_eq!(err.name(), "a\r\nSet-Cookie: x");
/// assert_eq!(err.to_string(), "policy name \"a\\r\\nSet-Cookie: x\": '\\r' is not allowed in a header (printable ASCII only)");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderNameError {
    name: String,
}

impl HeaderNameError {
    /// Checks `name`: non-empty printable ASCII.
    pub(crate) fn check(name: &str) -> Result<(), HeaderNameError> {
        if name.is_empty() || !name.chars().all(is_printable) {
            return Err(HeaderNameError { name: name.into() });
        }
        Ok(())
    }

    /// The rejected name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Whether `c` may appear in a structured-field string (escaped if `"` or `\`).
pub(crate) fn is_printable(c: char) -> bool {
    (' '..='~').contains(&c)
}

impl fmt::Display for HeaderNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `{:?}` escapes the offending characters, so the message itself stays one line.
        match self.name.chars().find(|&c| !is_printable(c)) {
            Some(bad) => write!(
                f,
                "policy name {:?}: {bad:?} is not allowed in a header (printable ASCII only)",
                self.name
            ),
            None => write!(f, "policy name must not be empty"),
        }
    }
}

impl std::error::Error for HeaderNameError {}
