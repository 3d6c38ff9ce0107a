//! [`check_headers`]: what every rendered set of rate-limit headers must satisfy.

use tollgate::policy::RateLimitHeaders;
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
