//! What the [`Engine`](crate::engine::Engine) is asked and answers: an [`Ask`] (a domain's
//! descriptors and what each costs), its [`Verdict`] (one [`Status`] per descriptor, the
//! overall [`Code`], the rate-limit headers), and the ways an ask or a reload is refused.

use arrayvec::ArrayVec;
use tollgate::policy::{PolicyConfigError, MAX_TIERS};
use tollgate::Nanos;

use crate::config::{ConfigError, Unit};

/// The most descriptors one request may carry.
pub(crate) const MAX_DESCRIPTORS: usize = 32;

/// The most entries one descriptor may carry.
pub(crate) const MAX_ENTRIES: usize = 16;

/// One question: a domain's descriptors, each a list of `(key, value)` entries and what it
/// costs.
#[derive(Debug)]
pub(crate) struct Ask<'a> {
    pub(crate) domain: &'a str,
    /// At most [`MAX_DESCRIPTORS`] (on the heap: a question moves into the call's
    /// future, which inline lists would make kilobytes to copy).
    pub(crate) descriptors: Vec<AskDescriptor<'a>>,
    /// The request's cost, for a descriptor without its own (0 counts as 1, as in Envoy).
    pub(crate) hits: u32,
}

/// One descriptor of an [`Ask`].
#[derive(Debug)]
pub(crate) struct AskDescriptor<'a> {
    /// At most [`MAX_ENTRIES`].
    pub(crate) entries: Vec<(&'a str, &'a str)>,
    /// Its own cost, overriding the request's.
    pub(crate) hits: Option<u64>,
    /// Whether the cost is given back instead of taken (Envoy's `is_negative_hits`).
    pub(crate) negative: bool,
}

/// Why an [`Ask`] was not decided: the caller's mistake, said in Envoy's words.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No domain.
    NoDomain,
    /// No descriptors.
    NoDescriptors,
    /// A descriptor without entries.
    EmptyDescriptor(usize),
    /// More descriptors or entries than the server takes.
    TooMany(&'static str, usize),
    /// A cost above 2^32 − 1.
    HitsTooLarge(usize),
    /// The limited descriptors match more tiers than one decision holds.
    TooManyTiers(usize),
    /// A field of the request the server does not implement.
    Unsupported(&'static str),
    /// The policy refused to decide, for a reason it states.
    Undecidable(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NoDomain => write!(f, "rate limit domain must not be empty"),
            Refusal::NoDescriptors => write!(f, "rate limit descriptor list must not be empty"),
            Refusal::EmptyDescriptor(i) => write!(f, "descriptors[{i}]: no entries"),
            Refusal::TooMany(what, max) => write!(f, "more than {max} {what}"),
            Refusal::HitsTooLarge(i) => write!(f, "descriptors[{i}].hits_addend: above 4294967295"),
            Refusal::TooManyTiers(n) => write!(
                f,
                "{n} limited descriptors match more than the {MAX_TIERS} limits one decision holds"
            ),
            Refusal::Unsupported(field) => write!(f, "{field}: not supported by tollgate-server"),
            Refusal::Undecidable(why) => write!(f, "{why}"),
        }
    }
}

/// Why a client's state was not read or reset ([`Engine::client`]).
///
/// [`Engine::client`]: crate::engine::Engine::client
#[derive(Debug)]
pub(crate) enum ClientError {
    /// The question is not one the engine answers.
    Refused(Refusal),
    /// The store did not take the reset (Redis failed: the client keeps its state).
    StoreFailed,
    /// The store did not answer the read (Redis failed; its failure policy's answer is no
    /// client's state).
    Unanswered,
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Refused(refusal) => write!(f, "{refusal}"),
            ClientError::StoreFailed => write!(
                f,
                "the store did not take the reset: the client keeps its state (see the server's log and tollgate_redis metrics)"
            ),
            ClientError::Unanswered => write!(
                f,
                "the store did not answer: the client's state is unknown (see the server's log and tollgate_redis metrics)"
            ),
        }
    }
}

/// A client's state ([`Engine::client`]): its descriptor's status as a check of cost 0
/// would report it, and each tier behind it.
///
/// [`Engine::client`]: crate::engine::Engine::client
#[derive(Debug)]
pub(crate) struct ClientState {
    pub(crate) status: Status,
    /// Empty for a limit that keeps no state (`unlimited`, a block).
    pub(crate) tiers: Vec<TierState>,
}

impl ClientState {
    pub(crate) fn stateless(status: Status) -> ClientState {
        ClientState {
            status,
            tiers: Vec::new(),
        }
    }
}

/// One tier of a [`ClientState`].
#[derive(Debug)]
pub(crate) struct TierState {
    pub(crate) name: Box<str>,
    /// The quota the client can spend at once (the `q` of `RateLimit-Policy`).
    pub(crate) quota: u64,
    pub(crate) remaining: u64,
    /// When the tier is whole again.
    pub(crate) reset_after: Nanos,
}

/// One client a check would deny now ([`Engine::limited`]): the descriptor it is, the
/// limit, and each tier of the limit's rule.
///
/// [`Engine::limited`]: crate::engine::Engine::limited
#[derive(Debug)]
pub(crate) struct LimitedDescriptor {
    pub(crate) domain: String,
    /// The descriptor's entries, in order.
    pub(crate) entries: Vec<(String, String)>,
    /// The limit's tollgate rule: its Envoy `name` if given, else the node's key.
    pub(crate) rule: String,
    /// How long until one more request would be admitted.
    pub(crate) retry_after: Nanos,
    /// Each tier, as a peek of one request reports it (a denying tier's state now, a tier
    /// that would admit what that request would leave).
    pub(crate) tiers: Vec<LimitedTier>,
}

/// One tier of a [`LimitedDescriptor`].
#[derive(Debug)]
pub(crate) struct LimitedTier {
    pub(crate) state: TierState,
    /// Whether it denies one more request now.
    pub(crate) denies: bool,
    /// How long until it admits one (zero if it does).
    pub(crate) retry_after: Nanos,
}

/// The answer of [`Engine::limited`].
///
/// [`Engine::limited`]: crate::engine::Engine::limited
#[derive(Debug)]
pub(crate) struct LimitedList {
    pub(crate) clients: Vec<LimitedDescriptor>,
    /// Whether every candidate was looked at (see `tollgate::policy::LimitedClients`).
    pub(crate) complete: bool,
}

/// Why rules were not applied (the old ones stay).
#[derive(Debug)]
pub(crate) enum ReloadError {
    /// The config did not load.
    Config(ConfigError),
    /// The policy refused the rules the config compiled to.
    Rules(PolicyConfigError),
    /// The load itself failed (its thread panicked).
    Panicked(String),
    /// The new config has no domain where the rules in force have some.
    Empty,
    /// The rules follow the fleet's published rules: the file is not read again.
    FollowsTheFleet,
}

impl std::fmt::Display for ReloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReloadError::Config(e) => write!(f, "{e}"),
            ReloadError::Rules(e) => write!(f, "the compiled rules: {e}"),
            ReloadError::Panicked(e) => write!(f, "loading the rules failed: {e}"),
            ReloadError::Empty => write!(
                f,
                "the new config has no domain: refused, as it would drop every limit in force"
            ),
            ReloadError::FollowsTheFleet => write!(
                f,
                "the rules follow the fleet's published rules (--fleet-rules): publish a change with --publish"
            ),
        }
    }
}

impl std::error::Error for ReloadError {}

/// Envoy's answer codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    /// Under the limit (or not limited).
    Ok,
    /// Over the limit.
    OverLimit,
}

impl Code {
    /// The protocol's name: `OK`, `OVER_LIMIT`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::OverLimit => "OVER_LIMIT",
        }
    }
}

/// Counts one request answered through `api` (`grpc`, `http`) by its outcome (a
/// [`Code::name`], or `invalid`): `tollgate_server_requests_total{api, code}`.
pub(crate) fn count(api: &'static str, outcome: &'static str) {
    metrics::counter!("tollgate_server_requests_total", "api" => api, "code" => outcome)
        .increment(1);
}

/// One descriptor's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Status {
    pub(crate) code: Code,
    /// The limit that applied: its name, requests per unit and unit (`None`: no limit, or
    /// one in tollgate's own terms that no Envoy unit states).
    pub(crate) limit: Option<(Box<str>, u32, Unit)>,
    /// What its tightest tier has left (`u32::MAX` unlimited, 0 for no limit).
    pub(crate) remaining: u32,
    /// When that tier is whole again (`None` for no limit).
    pub(crate) reset_after: Option<Nanos>,
    /// How long a denied descriptor waits (`None` unless denied).
    pub(crate) retry_after: Option<Nanos>,
}

impl Status {
    /// A descriptor no limit applies to (none matched, or it was replaced).
    pub(crate) const NONE: Status = Status {
        code: Code::Ok,
        limit: None,
        remaining: 0,
        reset_after: None,
        retry_after: None,
    };

    /// An `unlimited` descriptor.
    pub(crate) const UNLIMITED: Status = Status {
        code: Code::Ok,
        limit: None,
        remaining: u32::MAX,
        reset_after: None,
        retry_after: None,
    };
}

/// The answer to an [`Ask`].
#[derive(Debug)]
pub(crate) struct Verdict {
    /// Over the limit if any enforced descriptor is.
    pub(crate) code: Code,
    /// One per descriptor, in order.
    pub(crate) statuses: Vec<Status>,
    /// `RateLimit-Policy`, `RateLimit` and (denied) `Retry-After` of the enforced limits,
    /// draft-11; empty if none applied.
    pub(crate) headers: ArrayVec<(&'static str, String), 3>,
}
