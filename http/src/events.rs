//! What the layer tells the operator, through the kept facades: `tracing` events (feature
//! `tracing`, on by default) and `metrics` counters (feature `metrics`), both compiled out
//! without their feature.
//!
//! | event | `tracing` | `metrics` |
//! |---|---|---|
//! | every counted request outcome | | `tollgate_http_requests_total{outcome}` (`admitted`, `denied`, `refused`, `delayed`, `cancelled`, `shadow_denied`, `bad_key`, `too_costly`, `no_peer_address`, `skipped`: the [`LayerStats`](super::LayerStats) counts) |
//! | each rule's decision on a checked request (a rule of limits: a refusal is counted by `requests_total{outcome="refused"}`) | | `tollgate_http_rule_decisions_total{rule, outcome, mode}` (`allowed` / `denied`; `enforced` / `shadow`) |
//! | a denial | `debug`: the endpoint, the denying rules and tiers, the retry time | |
//! | a refusal (a deny entry or a ban) | `debug`: the endpoint, the entry or rule by its place in the rules file (`deny[0]`, `rules[2]`), its kind and its reason | |
//! | a missing or malformed key | `debug`: what is wrong | |
//! | a request costing more than the limits can ever admit | `debug`: the endpoint, the cost, the most they admit | `requests_total{outcome="too_costly"}` |
//! | a response whose actual-cost header is unreadable (settlement) | `debug`: the header | |
//! | an awaited check dropped outside a tokio runtime (what it took stays taken) | `debug`: the endpoint | `requests_total{outcome="cancelled"}` |
//! | no peer address (the server's wiring) | `error` naming the fix, at most once a minute | |
//! | rules that select by route template, on a layer that names requests by raw path (outside a router, or before any request matched a route) | `warn` naming the fix, at most once a minute | |
//! | how long the policy took to decide a checked request (awaited or not; the endpoint's lookup included when the rules read it) | | `tollgate_http_check_seconds` (histogram; the request's second clock read, only with the feature) |
//!
//! `delayed` and `shadow_denied` requests are also `admitted`, and so are `cancelled` ones
//! dropped during their delay (one dropped while its awaited check was in flight is
//! counted `cancelled` only).
//! Client keys are never logged or used as labels (they are unbounded, and often
//! personal). The endpoint is: a service whose endpoint names hold what identifies a
//! client (the raw path of `/{tenant}/orders`, with `Endpoint::raw_path()`) logs that too.

use tollgate::policy::PolicyDecision;

use super::error::KeyError;
use super::stats::Outcome;

/// Reports one counted `outcome`.
#[inline]
pub(crate) fn counted(outcome: Outcome) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_http_requests_total", "outcome" => outcome.label()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = outcome;
}

/// Reports each rule's part in `decision` ([`PolicyDecision::rule_outcomes`]); `shadow`:
/// the decision of the shadow rules.
#[inline]
pub(crate) fn decided(decision: &PolicyDecision, shadow: bool) {
    #[cfg(feature = "metrics")]
    {
        for (tier, allowed) in decision.rule_outcomes() {
            metrics::counter!(
                "tollgate_http_rule_decisions_total",
                "rule" => tier.rule_name().to_owned(),
                "outcome" => if allowed { "allowed" } else { "denied" },
                "mode" => if shadow { "shadow" } else { "enforced" }
            )
            .increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (decision, shadow);
}

/// Reports a denied request to `endpoint`.
#[inline]
pub(crate) fn denied(decision: &PolicyDecision, endpoint: &str) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        endpoint,
        denied_by = %DeniedBy(decision),
        retry_after_ms = decision.decision.retry_after.as_duration().as_millis(),
        "tollgate-http: request denied"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (decision, endpoint);
}

/// Reports a request to `endpoint` refused by a deny entry or a ban: the entry or rule by
/// its place in the rules file (`deny[0]`, `rules[2]`), its kind and its reason — never
/// its subject, which for an entry by client is a client key.
#[inline]
pub(crate) fn refused(decision: &PolicyDecision, endpoint: &str) {
    #[cfg(feature = "tracing")]
    if let Some(listing) = decision.listing() {
        tracing::debug!(
            endpoint,
            kind = listing.kind().as_str(),
            entry = listing.path(),
            reason = listing.reason().unwrap_or(""),
            "tollgate-http: request refused"
        );
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (decision, endpoint);
}

/// Reports a request to `endpoint` refused for its `cost`, more than the limits can ever
/// admit (`max_cost`).
#[inline]
pub(crate) fn too_costly(endpoint: &str, cost: u32, max_cost: u64) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        endpoint,
        cost,
        max_cost,
        "tollgate-http: request costs more than the limits can admit"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (endpoint, cost, max_cost);
}

/// Reports a response whose actual-cost header `name` could not be read: its estimate
/// stands.
#[inline]
pub(crate) fn unreadable_cost(name: &http::HeaderName) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        header = name.as_str(),
        "tollgate-http: actual cost not a decimal u32; the estimate stands"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = name;
}

/// Reports a request to `endpoint` dropped while its check was awaited, outside a tokio
/// runtime: nothing can await the answer, so what an admitting one took stays taken.
#[cold]
pub(crate) fn refund_lost(endpoint: &str) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        endpoint,
        "tollgate-http: awaited check dropped outside a tokio runtime; \
         what it took is not given back"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = endpoint;
}

/// Reports a request without a usable client key.
#[inline]
pub(crate) fn bad_key(error: &KeyError) {
    #[cfg(feature = "tracing")]
    tracing::debug!(%error, "tollgate-http: no usable client key");
    #[cfg(not(feature = "tracing"))]
    let _ = error;
}

/// When a request's check started, to report how long the policy took
/// (`tollgate_http_check_seconds`): a clock read only with the `metrics` feature, nothing
/// without it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CheckTimer {
    #[cfg(feature = "metrics")]
    started: std::time::Instant,
}

impl CheckTimer {
    /// A check starts now.
    #[inline]
    pub(crate) fn start() -> CheckTimer {
        CheckTimer {
            #[cfg(feature = "metrics")]
            started: std::time::Instant::now(),
        }
    }

    /// The check has its answer.
    #[inline]
    pub(crate) fn checked(self) {
        #[cfg(feature = "metrics")]
        metrics::histogram!("tollgate_http_check_seconds")
            .record(self.started.elapsed().as_secs_f64());
    }
}

/// The denying `rule/tier` pairs of a decision, written only if an event is emitted.
#[cfg(feature = "tracing")]
struct DeniedBy<'a>(&'a PolicyDecision);

#[cfg(feature = "tracing")]
impl core::fmt::Display for DeniedBy<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, t) in self.0.denied_by().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}/{}", t.rule_name(), t.name())?;
        }
        Ok(())
    }
}
