//! [`check_headers`]: what every rendered set of rate-limit headers must satisfy;
//! [`check_header_styles`]: what `tollgate-http` sends agrees with it.

use tollgate_http::HeaderStyle;
use tollgate::policy::{PolicyDecision, RateLimitHeaders};
use tollgate_core::Decision;

/// Asserts, for headers rendered from `decision` (the tightest decision they describe):
/// `Retry-After` present exactly on a deny, whole seconds, never 0; the legacy
/// `X-RateLimit-*` numbers match the decision; `X-RateLimit-Reset` is at least 1 on a deny;
/// the status is 429 exactly on a deny.
pub fn check_headers(headers: &RateLimitHeaders, decision: &Decision) {
    let number = |name: &str| -> u64 {
        let value = headers
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing: {headers:?}"));
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a whole number: {value:?}"))
    };
    assert_eq!(number("X-RateLimit-Limit"), decision.limit);
    assert_eq!(number("X-RateLimit-Remaining"), decision.remaining);
    let reset = number("X-RateLimit-Reset");
    if decision.allowed {
        assert_eq!(headers.get("Retry-After"), None, "Retry-After on an admit");
        assert_eq!(RateLimitHeaders::status(decision), 200);
    } else {
        let retry = number("Retry-After");
        assert!(retry >= 1, "Retry-After 0 on a deny: {headers:?}");
        // Rounded up: never earlier than the decision says.
        assert!(
            u128::from(retry) * 1_000_000_000 >= u128::from(decision.retry_after.as_u64()),
            "Retry-After {retry} s before retry_after {:?}",
            decision.retry_after
        );
        assert!(reset >= 1, "X-RateLimit-Reset 0 on a deny");
        assert_eq!(RateLimitHeaders::status(decision), 429);
    }
    for (name, value) in headers.iter() {
        assert!(
            !name.is_empty() && !value.is_empty(),
            "empty header {name:?}: {value:?}"
        );
    }
}

/// Asserts, for a decision whose tiers may carry any name (labels built by hand): every
/// header style of `tollgate-http` sends the `RateLimit-Policy` / `RateLimit` fields
/// [`RateLimitHeaders`] renders (draft-11 with `;pk=:..:` after each item), the legacy
/// fields and `Retry-After` alike; each item is a well-formed sf-string, reading back as
/// the tier's name with `?` for every character an sf-string cannot hold, then exactly the
/// tier's numbers; every value printable ASCII.
pub fn check_header_styles(decision: &PolicyDecision, partition: &str) {
    let expected = RateLimitHeaders::from_policy_decision(decision);
    for (name, value) in expected.iter() {
        assert!(printable(value), "{name}: {value:?}");
    }
    if let Some(tier) = decision.tiers().first() {
        check_headers(&expected, &decision.decision);
        if decision.tiers().len() == 1 {
            let d = &tier.decision;
            let t = if d.allowed {
                d.reset_after.as_secs_ceil()
            } else {
                d.retry_after.as_secs_ceil().max(1)
            };
            let policy = format!(
                ";q={};w={}",
                tier.quota(),
                tier.window().as_secs_ceil().max(1)
            );
            let limit = format!(";r={};t={t}", d.remaining);
            for (field, params) in [("RateLimit-Policy", policy), ("RateLimit", limit)] {
                let value = expected.get(field).unwrap_or_default();
                let (read, rest) = parse_sf_string(value)
                    .unwrap_or_else(|| panic!("{field} is not an sf-string item: {value:?}"));
                assert_eq!(read, replaced(tier.name()), "{field}: {value:?}");
                assert_eq!(rest, params, "{field}: {value:?}");
            }
        }
    } else {
        assert_eq!(expected.iter().count(), 0, "{expected:?}");
    }
    for style in [
        HeaderStyle::Draft10,
        HeaderStyle::Draft11,
        HeaderStyle::Legacy,
        HeaderStyle::None,
    ] {
        let sent = style.render(decision, &[], partition);
        let get = |name: &str| {
            sent.get(name)
                .map(|v| v.to_str().unwrap_or("<not visible ASCII>"))
        };
        for (name, value) in &sent {
            assert!(
                printable(value.to_str().unwrap_or("\0")),
                "{style:?} {name}: {value:?}"
            );
        }
        assert_eq!(get("retry-after"), expected.get("Retry-After"), "{style:?}");
        let draft = matches!(style, HeaderStyle::Draft10 | HeaderStyle::Draft11);
        let legacy = matches!(style, HeaderStyle::Legacy);
        for field in ["RateLimit-Policy", "RateLimit"] {
            let want = expected.get(field).filter(|_| draft);
            let got = get(field).map(|v| match style {
                HeaderStyle::Draft11 => unkeyed(v),
                _ => v.to_owned(),
            });
            assert_eq!(got.as_deref(), want, "{style:?} {field}");
        }
        for field in [
            "X-RateLimit-Limit",
            "X-RateLimit-Remaining",
            "X-RateLimit-Reset",
        ] {
            let want = expected.get(field).filter(|_| legacy);
            assert_eq!(get(field), want, "{style:?} {field}");
        }
    }
}

/// `value`, a draft-11 list, with each item's `pk` parameter taken out, after checking
/// each item has exactly one and that it is a byte sequence of 8 bytes (12 base64
/// characters).
fn unkeyed(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    loop {
        let (_, after) =
            parse_sf_string(rest).unwrap_or_else(|| panic!("not an sf-string item: {rest:?}"));
        out.push_str(&rest[..rest.len() - after.len()]);
        // Parameters (integers and byte sequences: no ", " in them) up to the next member.
        let (params, next) = after.split_at(after.find(", ").unwrap_or(after.len()));
        assert!(params.starts_with(';'), "{value:?}");
        let mut pks = 0;
        for param in params.split(';').skip(1) {
            match param.strip_prefix("pk=") {
                Some(pk) => {
                    let b64 = pk
                        .strip_prefix(':')
                        .and_then(|p| p.strip_suffix(':'))
                        .unwrap_or_else(|| panic!("pk not a byte sequence: {pk:?}"));
                    assert!(
                        b64.len() == 12
                            && b64.ends_with('=')
                            && b64[..11]
                                .bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/'),
                        "pk {pk:?}"
                    );
                    pks += 1;
                }
                None => {
                    out.push(';');
                    out.push_str(param);
                }
            }
        }
        assert_eq!(pks, 1, "{value:?}");
        match next.strip_prefix(", ") {
            Some(n) => {
                out.push_str(", ");
                rest = n;
            }
            None => return out,
        }
    }
}

fn printable(value: &str) -> bool {
    value.bytes().all(|b| (b' '..=b'~').contains(&b))
}

/// `name` as an sf-string can hold it: each character outside printable ASCII a `?`.
fn replaced(name: &str) -> String {
    name.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

/// Parses the sf-string at the start of `input` as RFC 9651 §4.2.5 does (failing on a
/// character outside printable ASCII, an escape of anything but `"` or `\`, or no closing
/// quote): the string and what follows it.
fn parse_sf_string(input: &str) -> Option<(String, &str)> {
    let rest = input.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = rest.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, e @ ('"' | '\\'))) => out.push(e),
                _ => return None,
            },
            '"' => return Some((out, &rest[i + 1..])),
            c if (' '..='~').contains(&c) => out.push(c),
            _ => return None,
        }
    }
    None
}
