//! What the layer makes of the policy's decision on a request: the answer that ends it
//! (429, 413), or what an admitted request carries on with (its rate-limit fields, the
//! [`Charge`] it holds, the delay to wait out, the [`Admission`] a handler can read).

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response};
use http_body_util::Full;
use tollgate::{InsufficientCapacity, Nanos};

use super::charge::Charge;
use super::check::Check;
use super::denial::Denial;
use super::events;
use super::grpc;
use super::header_style::Fields;
use super::layer::Shared;
use super::problem::{cost_too_large, forbidden, too_many_requests};
use super::stats::Outcome;
use tollgate::policy::{PolicyDecision, TierOutcome};

/// What the policy said about a forwarded request: with
/// [`RateLimitLayer::expose_admission`](super::RateLimitLayer::expose_admission),
/// inserted into the extensions of every request the layer passes on, so a handler can
/// see it (e.g. to log the delay it waited or show the remaining quota).
///
/// ```
/// use tollgate_http::Admission;
/// async fn handler(request: http::Request<axum::body::Body>) -> String {
///     match request.extensions().get::<Admission>() {
///         Some(a) => format!("{} left, waited {:?}", a.remaining, a.delay.as_duration()),
///         None => "not rate limited".to_owned(),
///     }
/// }
/// # let _ = handler;
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Admission {
    /// How long the request was held before being forwarded (leaky-bucket tiers).
    pub delay: Nanos,
    /// The tightest tier's remaining permits.
    pub remaining: u64,
    /// The tightest tier's limit.
    pub limit: u64,
    /// The permits charged (the estimate, when settled).
    pub cost: u32,
    /// Whether a shadow rule would have denied the request.
    pub shadow_denied: bool,
}

/// What an admitted request carries on with: its rate-limit fields, the permits to give
/// back or settle, the delay to wait out first, the admission to expose.
pub(super) struct Admitted {
    pub(super) fields: Fields,
    pub(super) charge: Option<Box<Charge>>,
    pub(super) delay: Nanos,
    pub(super) admission: Option<Admission>,
}

/// What the layer does with a request once the policy decided.
pub(super) enum Verdict {
    /// Pass it on (see [`ResponseFuture::forward`](super::ResponseFuture::forward)).
    Forward(Admitted),
    /// Answer it without calling the service.
    Answer(Response<Full<Bytes>>),
    /// Pass it on as it came: admitted at once, with no fields to write, no permits to
    /// give back or settle and no admission to expose.
    Pass,
}

/// The layer's verdict on the policy's `decision` for a request with `headers` (on the
/// endpoint `endpoint` names, asked only where it is reported or kept): the
/// response that ends it (denied: 429; refused by a deny entry or a ban: 403; a cost
/// beyond the limits: 413; for a gRPC call, the
/// gRPC statuses of [`grpc`]), or, once the shadow rules are checked, what the admitted
/// request carries on with ([`Verdict::Pass`] if nothing: the common path of a layer
/// without headers, kept inline; the rest is out of line).
#[inline(always)]
pub(super) fn admit<'e>(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    decision: Result<&PolicyDecision, InsufficientCapacity>,
    client: &str,
    endpoint: &dyn Fn() -> &'e str,
    cost: u32,
) -> Verdict {
    match decision {
        Ok(d) if d.allowed() => {
            shared.counters.count(Outcome::Admitted);
            events::decided(d, false);
            if shared.plain && d.delay() == Nanos::ZERO {
                return Verdict::Pass;
            }
            forward(shared, d, client, endpoint, cost)
        }
        _ => refuse(shared, headers, decision, (client, endpoint(), cost)),
    }
}

/// [`admit`]'s answer to a request the policy did not admit: denied, refused, or costing
/// more than the limits can admit.
#[inline(never)]
fn refuse(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    decision: Result<&PolicyDecision, InsufficientCapacity>,
    (client, endpoint, cost): (&str, &str, u32),
) -> Verdict {
    let counters = &shared.counters;
    let decision = match decision {
        Ok(d) => d,
        Err(e) => {
            counters.count(Outcome::TooCostly);
            events::too_costly(endpoint, cost, e.max_cost);
            if let Some(content_type) = grpc::answer_type(headers) {
                let message = format!(
                    "request cost {cost} exceeds the most the limits can admit ({})",
                    e.max_cost
                );
                return Verdict::Answer(grpc::refusal(
                    content_type,
                    grpc::Code::InvalidArgument,
                    &message,
                    None,
                ));
            }
            return Verdict::Answer(cost_too_large(cost, e.max_cost));
        }
    };
    let ban = decision.is_ban();
    if ban {
        counters.count(Outcome::Refused);
        events::refused(decision, endpoint);
    } else {
        counters.count(Outcome::Denied);
        events::decided(decision, false);
        events::denied(decision, endpoint);
    }
    let grpc = grpc::answer_type(headers);
    if let Some(answer) = &shared.on_denied {
        let mut fields = HeaderMap::new();
        shared
            .style
            .fields(decision, &[], client)
            .insert_into(&mut fields);
        let denial = Denial::new(decision, fields, grpc, client, endpoint);
        return Verdict::Answer(answer(&denial));
    }
    let mut response = match (grpc, ban) {
        (Some(content_type), true) => grpc::permission_denied(content_type, decision),
        (Some(content_type), false) => grpc::resource_exhausted(content_type, decision),
        (None, true) => forbidden(decision),
        (None, false) => too_many_requests(decision),
    };
    shared
        .style
        .fields(decision, &[], client)
        .insert_into(response.headers_mut());
    Verdict::Answer(response)
}

/// [`admit`]'s verdict on an admitted request that carries something on: its fields, a
/// charge to give back or settle, a delay, an admission, or the shadow rules' check.
#[inline(never)]
fn forward<'e>(
    shared: &Arc<Shared>,
    decision: &PolicyDecision,
    client: &str,
    endpoint: &dyn Fn() -> &'e str,
    cost: u32,
) -> Verdict {
    // Whether the shadow rules took permits (given back with the request's), and whether
    // they denied.
    let (mut shadow_taken, mut shadow_denied) = (false, false);
    let fields = match &shared.shadow {
        None => fields(shared, decision, &[], client),
        Some(shadow) => {
            let request = (client, endpoint(), cost);
            shadowed(
                shared,
                &**shadow,
                decision,
                request,
                &mut shadow_taken,
                &mut shadow_denied,
            )
        }
    };
    let delay = decision.delay();
    let admission = shared.admission.then(|| Admission {
        delay,
        remaining: decision.remaining(),
        limit: decision.limit(),
        cost,
        shadow_denied,
    });
    let needs_charge = delay > Nanos::ZERO || shared.settle.is_some();
    let charge = needs_charge.then(|| {
        Box::new(Charge {
            shared: Arc::clone(shared),
            client: client.to_owned(),
            endpoint: endpoint().to_owned(),
            cost,
            shadow_taken,
        })
    });
    Verdict::Forward(Admitted {
        fields,
        charge,
        delay,
        admission,
    })
}

/// The rate-limit fields of an admitted request whose decision is `decision`, with the
/// shadow rules' tiers `shadow_tiers`: the exempt header for a request a listing admits
/// (when the layer names one), else the header style's fields. The admission's, and the
/// settlement's after it.
#[inline(always)]
pub(super) fn fields(
    shared: &Shared,
    decision: &PolicyDecision,
    shadow_tiers: &[TierOutcome],
    client: &str,
) -> Fields {
    match (&shared.exempt_header, decision.listing()) {
        (Some(name), Some(listing)) if listing.admits() => Fields::Exempt(
            name.clone(),
            HeaderValue::from_static(listing.kind().as_str()),
        ),
        _ => shared.style.fields(decision, shadow_tiers, client),
    }
}

/// An admitted request `(client, endpoint, cost)` under a layer with shadow rules:
/// checks them (never enforced), sets `taken` if they took permits (to give back with the
/// request's) and `denied` if they denied (counted and reported), and answers the
/// request's fields (the shadow tiers among them if
/// [`shadow_headers`](super::RateLimitLayer::shadow_headers) asks).
#[inline(never)]
fn shadowed(
    shared: &Shared,
    shadow: &dyn Check,
    decision: &PolicyDecision,
    (client, endpoint, cost): (&str, &str, u32),
    taken: &mut bool,
    denied: &mut bool,
) -> Fields {
    let mut shadow_decision = PolicyDecision::empty();
    let checked = shadow
        .check_now(client, &|| endpoint, cost, &mut shadow_decision)
        .map(|()| &shadow_decision);
    *taken = matches!(&checked, Ok(d) if d.allowed());
    *denied = !*taken;
    if let Ok(d) = &checked {
        events::decided(d, true);
    }
    if *denied {
        shared.counters.count(Outcome::ShadowDenied);
    }
    let shadow_tiers = match &checked {
        Ok(d) if shared.shadow_headers => d.tiers(),
        _ => &[],
    };
    fields(shared, decision, shadow_tiers, client)
}
