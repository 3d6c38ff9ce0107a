//! [`RateLimitHeaders`]: HTTP response headers rendered from a decision — pure functions,
//! no I/O, no clock.
//!
//! - `RateLimit-Policy` and `RateLimit`, per the IETF httpapi draft
//!   `draft-ietf-httpapi-ratelimit-headers-10` (`tollgate-http`'s layer writes draft-11 by
//!   default: the same items with a `pk` partition key): each is a structured-field List of
//!   Items whose value is the policy name as an sf-string, with parameters. `RateLimit-Policy`
//!   items carry `q` (the quota the policy allocates, required) and `w` (the time window
//!   it is for, in whole seconds, never 0: see `advertised` in `tier.rs` for a bucket's);
//!   `RateLimit` items carry `r` (remaining quota units, required) and `t` (seconds until
//!   more quota is available). Items are joined with `", "` (the canonical serialization).
//! - Legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (delta
//!   seconds), from the tightest tier.
//! - `Retry-After` (delta seconds) on a deny only: rounded up, never 0, and never earlier
//!   than the `t` it accompanies.
//!
//! Seconds are always rounded up: a client that waits what it is told is never early.
//!
//! Names never break a header: [`RateLimitHeaders::from_decision`] rejects a name outside
//! printable ASCII ([`HeaderNameError`]: CR, LF, NUL, non-ASCII), and quotes and
//! backslashes are escaped inside the sf-string. Rule and tier names are checked the same
//! way when a config is validated; a hand-built [`TierOutcome`] with such a character has
//! it rendered as `?`, as every `tollgate_http::HeaderStyle` does: the items are written
//! by the one structured-field writer (`structured_fields.rs`, which says why `?`).

use tollgate_core::{Decision, Nanos};

use super::structured_fields::{limit_item, policy_item};
use super::{HeaderNameError, PolicyDecision, TierOutcome};

/// The rendered rate-limit headers of one response, as `(name, value)` pairs in a fixed
/// order. Build with [`from_policy_decision`](Self::from_policy_decision) (every tier a
/// request was checked against) or [`from_decision`](Self::from_decision) (one core
/// decision).
///
/// ```
/// use tollgate::policy::RateLimitHeaders;
/// use tollgate::{Decision, Nanos};
/// let denied = Decision::deny(100, 0, Nanos::from_secs(60), Nanos::from_millis(1500));
/// let headers = RateLimitHeaders::from_decision("default", 100, Nanos::from_secs(60), &denied)?;
/// assert_eq!(headers.get("RateLimit-Policy"), Some("\"default\";q=100;w=60"));
/// assert_eq!(headers.get("RateLimit"), Some("\"default\";r=0;t=2"));
/// assert_eq!(headers.get("Retry-After"), Some("2"));
/// # Ok::<(), tollgate::policy::HeaderNameError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateLimitHeaders {
    fields: Vec<(&'static str, String)>,
}

/// Whole seconds, rounded up.
fn secs_ceil(n: Nanos) -> u64 {
    n.as_secs_ceil()
}

impl RateLimitHeaders {
    /// The `RateLimit-Policy` field value for `tiers`: `"name";q=Q;w=W, ...`.
    ///
    /// ```
    /// use tollgate::policy::{Policy, RateLimitHeaders};
    /// let policy = Policy::from_toml(r#"
    ///     [[rules]]
    ///     name = "api"
    ///     [[rules.tiers]]
    ///     name = "burst"
    ///     limit = 100
    ///     window = "1m"
    ///     [[rules.tiers]]
    ///     name = "daily"
    ///     limit = 1000
    ///     window = "1d"
    /// "#, tollgate::policy::FnClock(|| tollgate::Nanos::ZERO))?;
    /// let decision = policy.allow("acct_1", "/", 1)?;
    /// assert_eq!(
    ///     RateLimitHeaders::policy_value(decision.tiers()),
    ///     "\"burst\";q=100;w=60, \"daily\";q=1000;w=86400"
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn policy_value(tiers: &[TierOutcome]) -> String {
        let mut out = String::new();
        for t in tiers {
            policy_item(&mut out, t.name(), t.quota(), t.window(), None);
        }
        out
    }

    /// The `RateLimit` field value for `tiers`: `"name";r=R;t=T, ...`.
    pub fn limit_value(tiers: &[TierOutcome]) -> String {
        let mut out = String::new();
        for t in tiers {
            limit_item(&mut out, t.name(), &t.decision, None);
        }
        out
    }

    /// `Retry-After` for `decision`: `None` when admitted, else whole seconds rounded up
    /// and at least 1.
    pub fn retry_after(decision: &Decision) -> Option<String> {
        (!decision.allowed).then(|| secs_ceil(decision.retry_after).max(1).to_string())
    }

    /// Every header for a policy decision: `RateLimit-Policy` and `RateLimit` list every
    /// tier checked; the legacy `X-RateLimit-*` and `Retry-After` describe the tightest.
    /// No header at all when no rule matched.
    pub fn from_policy_decision(decision: &PolicyDecision) -> RateLimitHeaders {
        let tiers = decision.tiers();
        if tiers.is_empty() {
            return RateLimitHeaders::default();
        }
        let mut fields = vec![
            ("RateLimit-Policy", Self::policy_value(tiers)),
            ("RateLimit", Self::limit_value(tiers)),
        ];
        Self::push_legacy(&mut fields, &decision.decision);
        RateLimitHeaders { fields }
    }

    /// Every header for one core decision under a policy called `name` allowing `quota`
    /// per `window`.
    ///
    /// `name` must be non-empty printable ASCII (it is rendered as a structured-field
    /// string, quotes and backslashes escaped); anything else, CR and LF above all, is a
    /// [`HeaderNameError`] rather than a header that could be split or forged.
    pub fn from_decision(
        name: &str,
        quota: u64,
        window: Nanos,
        decision: &Decision,
    ) -> Result<RateLimitHeaders, HeaderNameError> {
        HeaderNameError::check(name)?;
        let mut policy = String::new();
        policy_item(&mut policy, name, quota, window, None);
        let mut limit = String::new();
        limit_item(&mut limit, name, decision, None);
        let mut fields = vec![("RateLimit-Policy", policy), ("RateLimit", limit)];
        Self::push_legacy(&mut fields, decision);
        Ok(RateLimitHeaders { fields })
    }

    /// `X-RateLimit-Reset` for `d`: seconds until the quota is restored, or, on a deny,
    /// until the later of that and the retry time (at least 1).
    pub fn legacy_reset(d: &Decision) -> u64 {
        if d.allowed {
            secs_ceil(d.reset_after)
        } else {
            secs_ceil(d.reset_after.max(d.retry_after)).max(1)
        }
    }

    fn push_legacy(fields: &mut Vec<(&'static str, String)>, d: &Decision) {
        fields.push(("X-RateLimit-Limit", d.limit.to_string()));
        fields.push(("X-RateLimit-Remaining", d.remaining.to_string()));
        fields.push(("X-RateLimit-Reset", Self::legacy_reset(d).to_string()));
        if let Some(retry) = Self::retry_after(d) {
            fields.push(("Retry-After", retry));
        }
    }

    /// The value of header `name` (case-insensitive), if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// All `(name, value)` pairs, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.fields.iter().map(|(n, v)| (*n, v.as_str()))
    }

    /// The HTTP status a gateway should answer with: 200 when admitted, 429 when denied.
    pub fn status(decision: &Decision) -> u16 {
        if decision.allowed {
            200
        } else {
            429
        }
    }
}
