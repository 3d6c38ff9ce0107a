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
use tollgate::Decision;

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
    /// of the tightest tier (among the shadow tiers too, where they are shown on an
    /// admitted request).
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
    /// reported but never block) on behalf of client `partition`, with `Retry-After` on a
    /// deny (never on a ban, which waiting does not end).
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
        // A ban is no limit: waiting does not end it, so no `Retry-After` (as the layer's
        // own 403 has none).
        if decision.is_ban() {
            return;
        }
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
                let pk = match self {
                    HeaderStyle::Draft11 => Some(partition_key_into(partition, &mut pk_buf)),
                    HeaderStyle::Draft10 | HeaderStyle::Legacy | HeaderStyle::None => None,
                };
                // Each field written into the thread's scratch text, then copied once into
                // its value (one allocation of its exact size).
                SCRATCH.with_borrow_mut(|text| {
                    text.clear();
                    for t in tiers.iter().chain(shadow) {
                        policy_item(text, t.name(), t.quota(), t.window(), pk);
                    }
                    let policy = field_value(text);
                    text.clear();
                    for t in tiers.iter().chain(shadow) {
                        limit_item(text, t.name(), &t.decision, pk);
                    }
                    Fields::Draft([policy, field_value(text)])
                })
            }
            // The tightest of the enforced tiers and the shadow ones shown, as the policy
            // picks its decision's tightest tier; a denial's fields are its denying tier's
            // alone, the one its `Retry-After` is for.
            HeaderStyle::Legacy if any => {
                let enforced = (!tiers.is_empty()).then_some(&decision.decision);
                let shown = shadow.iter().filter(|_| decision.allowed());
                let shown = shown.map(|t| &t.decision);
                match Decision::combine(enforced.into_iter().chain(shown)) {
                    Some((_, d)) => {
                        Fields::Legacy([d.limit, d.remaining, RateLimitHeaders::legacy_reset(&d)])
                    }
                    None => Fields::None,
                }
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
    Draft([HeaderValue; 2]),
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`, as numbers (rendered into the response:
    /// three values inline would make every request's future 40 bytes larger).
    Legacy([u64; 3]),
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
            Fields::Draft([policy, limit]) => {
                headers.insert(RATELIMIT_POLICY, policy);
                headers.insert(RATELIMIT, limit);
            }
            Fields::Legacy([limit, remaining, reset]) => {
                headers.insert(X_LIMIT, HeaderValue::from(limit));
                headers.insert(X_REMAINING, HeaderValue::from(remaining));
                headers.insert(X_RESET, HeaderValue::from(reset));
            }
            Fields::Exempt(name, value) => {
                headers.insert(name, value);
            }
        }
    }
}

/// A draft field's value: `text` copied once (one allocation of its exact size), not
/// checked again byte by byte.
///
/// `text` is a valid field value by construction: the structured-field writer writes
/// visible ASCII and spaces only (an sf-string holds `0x20..=0x7E`, with any other
/// character written as `?`; numbers are digits; `pk` is `:` and base64), which the
/// `headers` fuzz target and the tests below check against `HeaderValue::from_str`.
fn field_value(text: &str) -> HeaderValue {
    debug_assert!(HeaderValue::from_str(text).is_ok(), "{text:?}");
    // SAFETY: the one requirement is valid UTF-8, which a `&str` is.
    unsafe {
        HeaderValue::from_maybe_shared_unchecked(bytes::Bytes::copy_from_slice(text.as_bytes()))
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
    base64_u64(hash, &mut buf[1..13]);
    buf[13] = b':';
    // SAFETY: `buf` holds ASCII only (zeroes as made, then ':' and what `base64_u64`
    // writes: its alphabet and '='), and ASCII is valid UTF-8.
    unsafe { std::str::from_utf8_unchecked(&buf[..]) }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Base64 (with padding) of the 8 big-endian bytes of `n`, into the 12 bytes of `out`:
/// ten 6-bit groups from the top, the last 4 bits followed by two zero bits, then one `=`.
fn base64_u64(n: u64, out: &mut [u8]) {
    for (i, slot) in out.iter_mut().take(10).enumerate() {
        // Truncation: masked to 6 bits.
        #[allow(clippy::cast_possible_truncation)]
        let group = ((n >> (58 - 6 * i)) & 63) as usize;
        *slot = ALPHABET[group];
    }
    if let [.., last, pad] = out {
        // Truncation: masked to 6 bits.
        #[allow(clippy::cast_possible_truncation)]
        let group = ((n & 0xf) << 2) as usize;
        *last = ALPHABET[group];
        *pad = b'=';
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 8-byte form against a general encoder's output (RFC 4648 alphabet, padding).
    #[test]
    fn base64_of_eight_bytes() {
        for (n, want) in [
            (0u64, "AAAAAAAAAAA="),
            (u64::MAX, "//////////8="),
            (0x666f_6f62_6172_2121, "Zm9vYmFyISE="),
            (0xeaa0_94bd_b57d_e1da, "6qCUvbV94do="),
        ] {
            let mut out = [0u8; 12];
            base64_u64(n, &mut out);
            assert_eq!(std::str::from_utf8(&out).unwrap(), want, "{n:#x}");
        }
    }

    /// Legacy fields with shadow tiers shown: the tightest of both on an admitted
    /// request; on a denied one, the denying enforced tier's alone (the one `Retry-After`
    /// is for), however long a shadow tier would make the client wait.
    #[test]
    fn legacy_fields_take_shadow_tiers_only_on_admitted_requests(
    ) -> Result<(), Box<dyn std::error::Error>> {
        use tollgate::policy::{FnClock, Policy};
        use tollgate::Nanos;
        let rules = |name: &str, limit: u32, window: &str| {
            format!(
                "[[rules]]\nname = \"{name}\"\nlimit = {limit}\nwindow = \"{window}\"\n\
                 algorithm = \"fixed_window\"\n"
            )
        };
        let clock = || FnClock(|| Nanos::from_secs(15));
        let enforced = Policy::from_toml(&rules("api", 2, "1m"), clock())?;
        let shadow = Policy::from_toml(&rules("trial", 1, "1h"), clock())?;
        let legacy = |decision: &PolicyDecision, shadow: &PolicyDecision| {
            let h = HeaderStyle::Legacy.render(decision, shadow.tiers(), "k");
            [
                "x-ratelimit-limit",
                "x-ratelimit-remaining",
                "x-ratelimit-reset",
            ]
            .map(|name| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned))
        };
        let some = |v: [&str; 3]| v.map(|s| Some(s.to_owned()));
        // Admitted by both: the trial's 1 an hour is the tighter.
        let (d, t) = (enforced.allow("k", "/", 1)?, shadow.allow("k", "/", 1)?);
        assert_eq!(legacy(&d, &t), some(["1", "0", "3585"]));
        // Admitted, the trial denying: still the trial's numbers (what was asked for).
        let (d, t) = (enforced.allow("k", "/", 1)?, shadow.allow("k", "/", 1)?);
        assert_eq!(legacy(&d, &t), some(["1", "0", "3585"]));
        // Denied: the enforced tier's, whose wait `Retry-After` states.
        let (d, t) = (enforced.allow("k", "/", 1)?, shadow.allow("k", "/", 1)?);
        assert!(!d.allowed());
        assert_eq!(legacy(&d, &t), some(["2", "0", "45"]));
        Ok(())
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
