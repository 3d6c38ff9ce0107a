//! The layer's own answers, RFC 9457 `application/problem+json`: [`too_many_requests`]
//! (429, naming each violated rule and tier, with `Retry-After`), [`forbidden`] (403, a
//! deny list entry or a ban, with its reason; no `Retry-After`: waiting does not end it),
//! `bad_request` (400, no usable client key), `cost_too_large` (413, a cost the limits can
//! never admit) and `server_error` (500, no peer address: the server's wiring). The first
//! two are public, for an [`on_denied`](super::RateLimitLayer::on_denied) closure to
//! answer with; the others only the layer gives.
//!
//! Seconds are always rounded up (a client that waits what it is told is never early), and
//! `Retry-After` on a deny is never 0.

use std::fmt::Write;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body_util::Full;
use tollgate::Nanos;

use tollgate::policy::structured_fields::push_u64;
use tollgate::policy::{ListingKind, PolicyDecision};

/// Appends `s` as a JSON string.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    json_escaped(out, s);
    out.push('"');
}

/// Appends `s` escaped for the inside of a JSON string.
fn json_escaped(out: &mut String, s: &str) {
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}

/// A problem-details response: `status`, `application/problem+json`, the body `json`.
fn problem(status: StatusCode, json: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(json)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

fn problem_head(out: &mut String, status: StatusCode, detail: &str) {
    out.push_str("{\"type\":\"about:blank\",\"title\":");
    json_string(out, status.canonical_reason().unwrap_or(""));
    let _ = write!(out, ",\"status\":{},\"detail\":", status.as_u16());
    json_string(out, detail);
}

/// The 429 for a denied `decision`: `Retry-After` and an RFC 9457 body naming every tier
/// that denied (rule, tier, quota, window and retry time in seconds).
///
/// ```
/// use tollgate_http::too_many_requests;
/// use tollgate::policy::{FnClock, Policy};
/// use tollgate::Nanos;
/// let policy = Policy::from_toml("[[rules]]\nname = \"api\"\nlimit = 1\nwindow = \"1m\"\n", FnClock(|| Nanos::ZERO))?;
/// policy.allow("a", "/", 1)?;
/// let denied = policy.allow("a", "/", 1)?;
/// let response = too_many_requests(&denied);
/// assert_eq!(response.status(), 429);
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn too_many_requests(decision: &PolicyDecision) -> Response<Full<Bytes>> {
    // One buffer, no `fmt` machinery: under an abuser's flood this is the hot path.
    let retry = retry_secs(decision.decision.retry_after);
    let mut json = String::with_capacity(256);
    json.push_str(
        "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\
         \"detail\":\"rate limit exceeded by ",
    );
    for (i, t) in decision.denied_by().enumerate() {
        if i > 0 {
            json.push_str(", ");
        }
        json.push_str("rule '");
        json_escaped(&mut json, t.rule_name());
        json.push_str("' tier '");
        json_escaped(&mut json, t.name());
        json.push('\'');
    }
    json.push_str("; retry in ");
    push_u64(&mut json, retry);
    json.push_str(" s\",\"retry_after\":");
    push_u64(&mut json, retry);
    json.push_str(",\"violated\":[");
    for (i, t) in decision.denied_by().enumerate() {
        if i > 0 {
            json.push(',');
        }
        json.push_str("{\"rule\":");
        json_string(&mut json, t.rule_name());
        json.push_str(",\"tier\":");
        json_string(&mut json, t.name());
        json.push_str(",\"quota\":");
        push_u64(&mut json, t.quota());
        json.push_str(",\"window\":");
        push_u64(&mut json, t.window().as_secs_ceil().max(1));
        json.push_str(",\"retry_after\":");
        push_u64(&mut json, retry_secs(t.decision.retry_after));
        json.push('}');
    }
    json.push_str("]}");
    let mut response = problem(StatusCode::TOO_MANY_REQUESTS, json);
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(retry));
    response
}

/// What a refused request is told: the rules file's reason, or that it is refused.
pub(crate) fn refusal_detail(decision: &PolicyDecision) -> String {
    let listing = decision.listing();
    match listing.and_then(|l| l.reason()) {
        Some(reason) => reason.to_owned(),
        None => "this client is not allowed to make this request".to_owned(),
    }
}

/// What refused a request, as a client may be told: a ban rule by name (as a 429 names
/// the rules that denied), a deny list without the entry (a client key may be a secret,
/// a network is the operator's business).
pub(crate) fn refused_by(decision: &PolicyDecision) -> String {
    match decision.listing() {
        Some(l) if l.kind() == ListingKind::Ban => format!("rule '{}'", l.subject()),
        Some(_) | None => "deny list".to_owned(),
    }
}

/// The 403 for a request a deny list entry or a ban (`limit = 0`) refused: an RFC 9457
/// body with the reason the rules file gives (`detail`, and `reason` when there is one)
/// and what refused it (`refused_by`: the ban rule's name, or `deny list`). No
/// `Retry-After`: waiting does not end a ban.
///
/// ```
/// use tollgate_http::forbidden;
/// use tollgate::policy::{FnClock, Policy};
/// use tollgate::Nanos;
/// let policy = Policy::from_toml(r#"
///     [[deny]]
///     client = "acct_666"
///     reason = "chargeback fraud: write to billing@example.com"
/// "#, FnClock(|| Nanos::ZERO))?;
/// let refused = policy.allow("acct_666", "/", 1)?;
/// let response = forbidden(&refused);
/// assert_eq!(response.status(), 403);
/// assert!(response.headers().get("retry-after").is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn forbidden(decision: &PolicyDecision) -> Response<Full<Bytes>> {
    let status = StatusCode::FORBIDDEN;
    let mut json = String::with_capacity(192);
    problem_head(&mut json, status, &refusal_detail(decision));
    if let Some(reason) = decision.listing().and_then(|l| l.reason()) {
        json.push_str(",\"reason\":");
        json_string(&mut json, reason);
    }
    json.push_str(",\"refused_by\":");
    json_string(&mut json, &refused_by(decision));
    json.push('}');
    problem(status, json)
}

/// `retry` in whole seconds, rounded up and never 0 (a client that waits what it is told
/// is never early): `Retry-After`, and every retry time the layer's answers state.
pub(crate) fn retry_secs(retry: Nanos) -> u64 {
    retry.as_secs_ceil().max(1)
}

/// The 400 for a request whose client key is missing or malformed.
pub(crate) fn bad_request(detail: &str) -> Response<Full<Bytes>> {
    let mut json = String::new();
    problem_head(&mut json, StatusCode::BAD_REQUEST, detail);
    json.push('}');
    problem(StatusCode::BAD_REQUEST, json)
}

/// The 500 for a request the layer cannot decide because of how the server is wired (no
/// peer address to key it by): `detail` says what to fix.
pub(crate) fn server_error(detail: &str) -> Response<Full<Bytes>> {
    let mut json = String::new();
    problem_head(&mut json, StatusCode::INTERNAL_SERVER_ERROR, detail);
    json.push('}');
    problem(StatusCode::INTERNAL_SERVER_ERROR, json)
}

/// The 413 for a request whose cost is more than the limits can ever admit (retrying can
/// never succeed, so it is not a 429).
pub(crate) fn cost_too_large(cost: u32, max_cost: u64) -> Response<Full<Bytes>> {
    let status = StatusCode::PAYLOAD_TOO_LARGE;
    let detail = format!("request cost {cost} exceeds the most the limits can admit ({max_cost})");
    let mut json = String::new();
    problem_head(&mut json, status, &detail);
    let _ = write!(json, ",\"cost\":{cost},\"max_cost\":{max_cost}}}");
    problem(status, json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes() {
        let mut out = String::new();
        json_string(&mut out, "a\"b\\c\nd");
        assert_eq!(out, r#""a\"b\\c\u000ad""#);
    }
}
