//! [`Listing`]: what decided a request outside its limits — an allow or deny list entry
//! (by client key or by network), an `unlimited` rule or a ban (`limit = 0`) — with the
//! reason the rules file gives; [`ListingKind`], which of them.

use core::fmt;

/// Which entry or special rule decided a request ([`Listing::kind`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ListingKind {
    /// An `[[allow]]` entry with `client`: admitted, no limit applies.
    AllowClient,
    /// An `[[allow]]` entry with `cidr`: admitted, no limit applies.
    AllowCidr,
    /// A `[[deny]]` entry with `client`: refused.
    DenyClient,
    /// A `[[deny]]` entry with `cidr`: refused.
    DenyCidr,
    /// A rule with `unlimited = true`: its slot admits without a limit.
    Unlimited,
    /// A rule with `limit = 0`: refused.
    Ban,
}

impl ListingKind {
    /// Whether requests it decides are admitted.
    pub const fn admits(self) -> bool {
        match self {
            ListingKind::AllowClient | ListingKind::AllowCidr | ListingKind::Unlimited => true,
            ListingKind::DenyClient | ListingKind::DenyCidr | ListingKind::Ban => false,
        }
    }

    /// `allow`, `deny`, `unlimited` or `ban`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ListingKind::AllowClient | ListingKind::AllowCidr => "allow",
            ListingKind::DenyClient | ListingKind::DenyCidr => "deny",
            ListingKind::Unlimited => "unlimited",
            ListingKind::Ban => "ban",
        }
    }
}

/// A list entry or special rule that decided a request outside its limits
/// ([`PolicyDecision::listing`](super::PolicyDecision::listing)): nothing was stored or
/// charged, no store was asked. A refusal ([`admits`](Self::admits) false) is a ban, not a
/// limit reached: waiting does not end it, so its decision's `retry_after` is
/// [`Nanos::MAX`](tollgate_core::Nanos::MAX) and it is rendered with no `Retry-After`.
///
/// ```
/// use tollgate::policy::{FnClock, ListingKind, Policy};
/// use tollgate::Nanos;
/// let policy = Policy::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 100
///     window = "1m"
///     [[deny]]
///     cidr = "203.0.113.0/24"
///     reason = "scraping (ticket 4711)"
/// "#, FnClock(|| Nanos::ZERO))?;
/// let refused = policy.allow("203.0.113.9", "/", 1)?;
/// assert!(!refused.allowed());
/// let listing = refused.listing().unwrap();
/// assert_eq!(listing.kind(), ListingKind::DenyCidr);
/// assert_eq!(listing.subject(), "203.0.113.0/24");
/// assert_eq!(listing.reason(), Some("scraping (ticket 4711)"));
/// assert_eq!(listing.to_string(), "deny list entry cidr 203.0.113.0/24 (deny[0]): scraping (ticket 4711)");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Listing {
    kind: ListingKind,
    path: Box<str>,
    subject: Box<str>,
    reason: Option<Box<str>>,
}

impl Listing {
    pub(crate) fn new(
        kind: ListingKind,
        path: String,
        subject: String,
        reason: Option<&str>,
    ) -> Listing {
        Listing {
            kind,
            path: path.into(),
            subject: subject.into(),
            reason: reason.map(Box::from),
        }
    }

    /// Which kind of entry or rule it is.
    pub fn kind(&self) -> ListingKind {
        self.kind
    }

    /// Whether requests it decides are admitted.
    pub fn admits(&self) -> bool {
        self.kind.admits()
    }

    /// Where it is in the rules file: `allow[2]`, `deny[0]`, `rules[3]`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What it names: the client key of a `client` entry, the network of a `cidr` entry
    /// (canonical: `2001:db8::/32`), or the rule's name.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The `reason` the rules file gives, if any.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }
}

/// `deny list entry cidr 203.0.113.0/24 (deny[0]): reason`, `ban rule "scrapers"
/// (rules[2])`: what it is, where, and the reason if there is one.
impl fmt::Display for Listing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (list, by) = match self.kind {
            ListingKind::AllowClient | ListingKind::AllowCidr => ("allow", "list entry"),
            ListingKind::DenyClient | ListingKind::DenyCidr => ("deny", "list entry"),
            ListingKind::Unlimited => ("unlimited", "rule"),
            ListingKind::Ban => ("ban", "rule"),
        };
        match self.kind {
            ListingKind::AllowClient | ListingKind::DenyClient => {
                write!(f, "{list} {by} client {:?}", self.subject)?
            }
            ListingKind::AllowCidr | ListingKind::DenyCidr => {
                write!(f, "{list} {by} cidr {}", self.subject)?
            }
            ListingKind::Unlimited | ListingKind::Ban => {
                write!(f, "{list} {by} {:?}", self.subject)?
            }
        }
        write!(f, " ({})", self.path)?;
        if let Some(reason) = &self.reason {
            write!(f, ": {reason}")?;
        }
        Ok(())
    }
}
