//! What the layer writes: the rate-limit header fields in the selected [`HeaderStyle`],
//! and the RFC 9457 `application/problem+json` answers (429 deny, 400 bad key, 413 cost
//! beyond capacity).
//!
//! Seconds are always rounded up (a client that waits what it is told is never early), and
//! `Retry-After` on a deny is never 0.

use std::fmt::Write;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::Full;
use tollgate_core::{Decision, Nanos};

use crate::policy::structured_fields::{limit_item, policy_item, push_u64};
use crate::policy::{PolicyDecision, RateLimitHeaders, TierOutcome};

/// Which rate-limit header fields admitted and denied responses carry. `Retry-After`
/// accompanies every deny whatever the style.
///
/// ```
/// use tollgate::http::HeaderStyle;
/// use tollgate::policy::{FnClock, Policy};
/// use tollgate::Nanos;
/// let policy = Policy::from_toml(
///     "[[rules]]\nname = \"api\"\nlimit = 10\nwindow = \"1m\"\nalgorithm = \"fixed_window\"\n",
///     FnClock(|| Nanos::from_secs(15)),
/// )?;
/// let decision = policy.allow("acct_1", "/", 1)?;
/// let h = HeaderStyle::Draft11.render(&decision, &[], "acct_1");
/// assert_eq!(h["ratelimit-policy"], "\"api\";q=10;w=60;pk=:6qCUvbV94do=:");
/// assert_eq!(h["ratelimit"], "\"api\";r=9;t=45;pk=:6qCUvbV94do=:");
/// let h = HeaderStyle::Draft10.render(&decision, &[], "acct_1");
/// assert_eq!(h["ratelimit"], "\"api\";r=9;t=45");
/// let h = HeaderStyle::Legacy.render(&decision, &[], "acct_1");
/// assert_eq!(h["x-ratelimit-limit"], "10");
/// assert_eq!(h["x-ratelimit-remaining"], "9");
/// assert_eq!(h["x-ratelimit-reset"], "45");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// `RateLimit-Policy` and `RateLimit` as structured-field lists, one item per tier
    /// that applied (`"name";q=Q;w=W;pk=:..:` and `"name";r=R;t=T;pk=:..:`): the draft-10
    /// items plus the `pk` partition key, a byte sequence naming the client's partition
    /// (the first 8 bytes of an FNV-1a hash of the client key, never the key itself).
    /// Tier names are sf-strings: a character one cannot hold (outside printable ASCII) is
    /// written as `?`, as [`RateLimitHeaders`] writes it, so the fields stay parseable and
    /// every number in them true (the structured-field writer's docs say why).
    #[default]
    Draft11,
    /// The same fields without `pk` (what [`RateLimitHeaders`] renders).
    Draft10,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (delta seconds)
    /// of the tightest tier.
    Legacy,
    /// No rate-limit fields (`Retry-After` on denies only).
    None,
}

const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

impl HeaderStyle {
    /// The header fields for `decision` (plus the tiers of `shadow`, rules that are
    /// reported but never block) on behalf of client `partition`.
    pub fn render(
        &self,
        decision: &PolicyDecision,
        shadow: &[TierOutcome],
        partition: &str,
    ) -> HeaderMap {
        let mut headers = HeaderMap::new();
        self.write(decision, shadow, partition, &mut headers);
        headers
    }

    /// [`render`](Self::render) into `headers` (replacing fields of the same names).
    pub fn write(
        &self,
        decision: &PolicyDecision,
        shadow: &[TierOutcome],
        partition: &str,
        headers: &mut HeaderMap,
    ) {
        self.fields(decision, shadow, partition)
            .insert_into(headers);
        if let Some(retry) = RateLimitHeaders::retry_after(&decision.decision) {
            insert(headers, RETRY_AFTER, retry);
        }
    }

    /// The rate-limit fields (not `Retry-After`), rendered without the `fmt` machinery
    /// and kept inline until the response is there to take them.
    pub(crate) fn fields(
        &self,
        decision: &PolicyDecision,
        shadow: &[TierOutcome],
        partition: &str,
    ) -> Fields {
        let mut fields = Fields::default();
        let tiers = decision.tiers();
        let any = !tiers.is_empty() || !shadow.is_empty();
        match self {
            HeaderStyle::Draft11 | HeaderStyle::Draft10 if any => {
                let mut pk_buf = [0u8; 14];
                let pk = matches!(self, HeaderStyle::Draft11)
                    .then(|| partition_key_into(partition, &mut pk_buf));
                let n = tiers.len() + shadow.len();
                let (mut policy, mut limit) =
                    (String::with_capacity(48 * n), String::with_capacity(40 * n));
                for t in tiers.iter().chain(shadow) {
                    policy_item(&mut policy, t.name(), t.quota(), t.window(), pk);
                    limit_item(&mut limit, t.name(), &t.decision, pk);
                }
                fields.names = FieldNames::Draft;
                fields.set(0, policy);
                fields.set(1, limit);
            }
            HeaderStyle::Legacy if !tiers.is_empty() => {
                let d = &decision.decision;
                fields.names = FieldNames::Legacy;
                fields.set_value(0, HeaderValue::from(d.limit));
                fields.set_value(1, HeaderValue::from(d.remaining));
                fields.set_value(2, HeaderValue::from(RateLimitHeaders::legacy_reset(d)));
            }
            _ => {}
        }
        fields
    }
}

/// The rendered rate-limit fields, held inline until the response is there to take them:
/// the values only (the names follow from which fields were rendered), so a response
/// future stays small.
#[derive(Debug, Default)]
pub(crate) struct Fields {
    names: FieldNames,
    values: [Option<HeaderValue>; 3],
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
enum FieldNames {
    #[default]
    None,
    /// `RateLimit-Policy`, `RateLimit`.
    Draft,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`.
    Legacy,
}

impl Fields {
    /// Sets field `i` to `value` if it is a valid field value (else leaves it out rather
    /// than fail the request).
    fn set(&mut self, i: usize, value: String) {
        if let Ok(v) = HeaderValue::try_from(value) {
            self.set_value(i, v);
        }
    }

    fn set_value(&mut self, i: usize, value: HeaderValue) {
        if let Some(slot) = self.values.get_mut(i) {
            *slot = Some(value);
        }
    }

    /// Moves the fields into `headers`, replacing any of the same names.
    pub(crate) fn insert_into(self, headers: &mut HeaderMap) {
        let names: &[HeaderName] = match self.names {
            FieldNames::None => return,
            FieldNames::Draft => &[RATELIMIT_POLICY, RATELIMIT],
            FieldNames::Legacy => &[X_LIMIT, X_REMAINING, X_RESET],
        };
        for (name, value) in names.iter().zip(self.values) {
            if let Some(value) = value {
                headers.insert(name.clone(), value);
            }
        }
    }
}

fn insert(headers: &mut HeaderMap, name: HeaderName, value: String) {
    if let Ok(v) = HeaderValue::try_from(value) {
        headers.insert(name, v);
    }
}

/// The `pk` of `client` written into `buf`: `:base64:` of the big-endian FNV-1a 64 hash
/// (stable across processes, so every node of a fleet names a client's partition alike).
fn partition_key_into<'b>(client: &str, buf: &'b mut [u8; 14]) -> &'b str {
    let hash = tollgate_core::hash::fnv1a(client.as_bytes());
    buf[0] = b':';
    base64_into(&hash.to_be_bytes(), &mut buf[1..13]);
    buf[13] = b':';
    // Base64 and ':' are ASCII.
    std::str::from_utf8(&buf[..]).unwrap_or(":AAAAAAAAAAA=:")
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Base64 (with padding) of `bytes` into `out`, which holds exactly its length.
fn base64_into(bytes: &[u8], out: &mut [u8]) {
    let mut o = 0;
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            let Some(slot) = out.get_mut(o) else { return };
            *slot = if i <= chunk.len() {
                ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]
            } else {
                b'='
            };
            o += 1;
        }
    }
}

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
/// use tollgate::http::too_many_requests;
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
    let retry = retry_secs(&decision.decision);
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
        push_u64(&mut json, retry_secs(&t.decision));
        json.push('}');
    }
    json.push_str("]}");
    let mut response = problem(StatusCode::TOO_MANY_REQUESTS, json);
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(retry));
    response
}

/// Whole seconds to wait, rounded up, never 0.
fn retry_secs(d: &Decision) -> u64 {
    d.retry_after.max(Nanos::new(1)).as_secs_ceil().max(1)
}

/// The 400 for a request whose client key is missing or malformed.
pub fn bad_request(detail: &str) -> Response<Full<Bytes>> {
    let mut json = String::new();
    problem_head(&mut json, StatusCode::BAD_REQUEST, detail);
    json.push('}');
    problem(StatusCode::BAD_REQUEST, json)
}

/// The 413 for a request whose cost is more than the limits can ever admit (retrying can
/// never succeed, so it is not a 429).
pub fn cost_too_large(cost: u32, max_cost: u64) -> Response<Full<Bytes>> {
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
    fn base64_matches_the_rfc_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            let mut out = vec![0u8; want.len()];
            base64_into(input.as_bytes(), &mut out);
            assert_eq!(out, want.as_bytes(), "{input}");
        }
    }

    #[test]
    fn partition_keys() {
        let mut buf = [0u8; 14];
        assert_eq!(partition_key_into("acct_1", &mut buf), ":6qCUvbV94do=:");
    }

    #[test]
    fn tier_names_an_sf_string_cannot_hold_are_written_with_question_marks() {
        use crate::policy::{RuleId, TierLabel};
        let tier = |name: &'static str| {
            let label: &'static TierLabel = Box::leak(Box::new(TierLabel {
                rule: RuleId(0),
                rule_name: "r".into(),
                name: name.into(),
                quota: 10,
                window: Nanos::from_secs(60),
                shared: false,
            }));
            PolicyDecision::combine([(label, Decision::allow(10, 9, Nanos::from_secs(6)))])
        };
        let ok = tier("api");
        let shadow = tier("shadow");
        let h = HeaderStyle::Draft10.render(&ok, shadow.tiers(), "k");
        assert_eq!(h["ratelimit"], "\"api\";r=9;t=6, \"shadow\";r=9;t=6");
        let bad = tier("caf\u{e9}\r\n");
        let h = HeaderStyle::Draft11.render(&bad, shadow.tiers(), "k");
        let pk = ";pk=:r2PmTIYB/Yo=:";
        assert_eq!(
            h["ratelimit-policy"],
            format!("\"caf???\";q=10;w=60{pk}, \"shadow\";q=10;w=60{pk}")
        );
        assert_eq!(
            h["ratelimit"],
            format!("\"caf???\";r=9;t=6{pk}, \"shadow\";r=9;t=6{pk}")
        );
        let none = PolicyDecision::combine([]);
        assert!(HeaderStyle::Legacy.render(&none, &[], "k").is_empty());
        assert!(HeaderStyle::Draft11.render(&none, &[], "k").is_empty());
    }

    #[test]
    fn json_escapes() {
        let mut out = String::new();
        json_string(&mut out, "a\"b\\c\nd");
        assert_eq!(out, r#""a\"b\\c\u000ad""#);
    }
}
