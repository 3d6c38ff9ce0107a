//! [`StoreScan`], [`StoredClient`] and [`ScanError`]: what a store that names its keys
//! finds in its own state for a listing of the clients currently limited
//! ([`Store::scan_clients`](super::Store::scan_clients)).

use std::fmt;

/// One (rule, client) pair a store keeps state for ([`StoreScan::clients`]): the rule's
/// name and the client as a request gave it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoredClient {
    /// The rule's name.
    pub rule: String,
    /// The client.
    pub client: String,
}

/// What a store's own scan found ([`Store::scan_clients`](super::Store::scan_clients)):
/// the pairs it keeps per-client state for, among the keys it examined.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreScan {
    /// Each pair once, in the order found.
    pub clients: Vec<StoredClient>,
    /// Whether every key was examined (`false`: the scan stopped at its bound).
    pub complete: bool,
}

/// Why a store's scan has no answer: the store did not answer it (Redis failed, or did
/// not answer in time), for the reason given.
///
/// ```
/// use tollgate::policy::ScanError;
/// let e = ScanError::new("timed out");
/// assert_eq!(e.reason(), "timed out");
/// assert_eq!(e.to_string(), "the store did not answer the scan of its clients: timed out");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanError {
    reason: String,
}

impl ScanError {
    /// A scan that failed for `reason`.
    pub fn new(reason: impl Into<String>) -> ScanError {
        ScanError {
            reason: reason.into(),
        }
    }

    /// Why.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the store did not answer the scan of its clients: {}",
            self.reason
        )
    }
}

impl std::error::Error for ScanError {}
