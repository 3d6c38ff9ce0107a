//! [`HeaderStyle`]: the rate-limit header fields a response carries (draft-11 with `pk`,
//! draft-10, legacy `X-RateLimit-*`, none), rendered per request into inline [`Fields`]
//! until the response is there to take them.
//!
//! Seconds are always rounded up: a client that waits what it is told is never early.

use std::cell::RefCell;

use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::HeaderMap;

use tollgate::policy::structured_fields::{limit_item, policy_item};
use tollgate::policy::{PolicyDecision, RateLimitHeaders, TierOutcome};

/// Which rate-limit header fields admitted and denied responses carry. `Retry-After`
/// accompanies every deny whatever the style.
///
/// ```
/// use tollgate_http::HeaderStyle;
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

thread_local! {
    /// Where a thread writes a draft field before copying it into its value: at most
    /// [`MAX_TIERS`](tollgate::policy::MAX_TIERS) items of a bounded name each, so it
    /// stays small, and no request allocates it anew.
    static SCRATCH: RefCell<String> = const { RefCell::new(String::new()) };
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
    #[inline]
    pub(crate) fn fields(
        &self,
        decision: &PolicyDecision,
        shadow: &[TierOutcome],
        partition: &str,
    ) -> Fields {
        match self {
            // Nothing to render: not even a look at the decision.
            HeaderStyle::None => Fields::default(),
            HeaderStyle::Draft11 | HeaderStyle::Draft10 | HeaderStyle::Legacy => {
                self.rendered(decision, shadow, partition)
            }
        }
    }

    /// [`fields`](Self::fields) of a style that has some.
    fn rendered(
        &self,
        decision: &PolicyDecision,
        shadow: &[TierOutcome],
        partition: &str,
    ) -> Fields {
        let tiers = decision.tiers();
        let any = !tiers.is_empty() || !shadow.is_empty();
        match self {
            HeaderStyle::Draft11 | HeaderStyle::Draft10 if any => {
                let mut pk_buf = [0u8; 14];
                let pk = matches!(self, HeaderStyle::Draft11)
                    .then(|| partition_key_into(partition, &mut pk_buf));
                // Each field written into the thread's scratch text, then copied once into
                // its value (one allocation of its exact size); a value that could not be
                // one is left out rather than fail the request.
                SCRATCH.with_borrow_mut(|text| {
                    text.clear();
                    for t in tiers.iter().chain(shadow) {
                        policy_item(text, t.name(), t.quota(), t.window(), pk);
                    }
                    let policy = HeaderValue::from_str(text).ok();
                    text.clear();
                    for t in tiers.iter().chain(shadow) {
                        limit_item(text, t.name(), &t.decision, pk);
                    }
                    Fields::Draft([policy, HeaderValue::from_str(text).ok()])
                })
            }
            HeaderStyle::Legacy if !tiers.is_empty() => {
                let d = &decision.decision;
                Fields::Legacy([
                    HeaderValue::from(d.limit),
                    HeaderValue::from(d.remaining),
                    HeaderValue::from(RateLimitHeaders::legacy_reset(d)),
                ])
            }
            HeaderStyle::Draft11
            | HeaderStyle::Draft10
            | HeaderStyle::Legacy
            | HeaderStyle::None => Fields::None,
        }
    }
}

/// The rendered rate-limit fields, held inline until the response is there to take them
/// (the values only: the names follow from the variant). `None` costs nothing to move on
/// and drop, which is what a request without fields does.
#[derive(Debug, Default)]
pub(crate) enum Fields {
    /// No fields.
    #[default]
    None,
    /// `RateLimit-Policy`, `RateLimit`.
    Draft([Option<HeaderValue>; 2]),
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`.
    Legacy([HeaderValue; 3]),
    /// The header [`RateLimitLayer::exempt_header`](super::RateLimitLayer::exempt_header)
    /// names, on a request admitted without limits: `allow` or `unlimited`.
    Exempt(HeaderName, HeaderValue),
}

impl Fields {
    /// Moves the fields into `headers`, replacing any of the same names.
    #[inline]
    pub(crate) fn insert_into(self, headers: &mut HeaderMap) {
        match self {
            Fields::None => {}
            Fields::Draft(values) => {
                for (name, value) in [RATELIMIT_POLICY, RATELIMIT].into_iter().zip(values) {
                    if let Some(value) = value {
                        headers.insert(name, value);
                    }
                }
            }
            Fields::Legacy(values) => {
                for (name, value) in [X_LIMIT, X_REMAINING, X_RESET].into_iter().zip(values) {
                    headers.insert(name, value);
                }
            }
            Fields::Exempt(name, value) => {
                headers.insert(name, value);
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
    let hash = tollgate::engine::hash::fnv1a(client.as_bytes());
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
        use tollgate::policy::{RuleId, TierLabel};
        use tollgate::{Decision, Nanos};
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
}
