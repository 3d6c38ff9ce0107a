//! Header rendering (`RateLimitHeaders::from_decision`) on arbitrary decisions, names,
//! quotas and windows: never panics, names outside printable ASCII refused (never in a
//! header value), `Retry-After` never 0 on a deny and never earlier
//! than the decision's `retry_after`, legacy numbers equal to the decision's.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate::policy::RateLimitHeaders;
use tollgate_core::{Decision, Nanos};
use tollgate_fuzz::check_headers;

#[derive(Arbitrary, Debug)]
struct Input {
    name: String,
    quota: u64,
    window: u64,
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset_after: u64,
    retry_after: u64,
    delay: u64,
}

fuzz_target!(|input: Input| {
    // Decisions as the core builds them: a deny always has retry_after ≥ 1.
    let decision = if input.allowed {
        Decision::allow(input.limit, input.remaining, Nanos::new(input.reset_after))
            .with_delay(Nanos::new(input.delay))
    } else {
        Decision::deny(
            input.limit,
            input.remaining,
            Nanos::new(input.reset_after),
            Nanos::new(input.retry_after),
        )
    };
    let headers = match RateLimitHeaders::from_decision(
        &input.name,
        input.quota,
        Nanos::new(input.window),
        &decision,
    ) {
        Ok(headers) => headers,
        Err(e) => {
            // Only a name an sf-string cannot hold is refused.
            assert!(
                input.name.is_empty() || input.name.chars().any(|c| !(' '..='~').contains(&c)),
                "{e}"
            );
            return;
        }
    };
    // Whatever the name, every value is printable ASCII: no CR/LF reaches a header.
    for (name, value) in headers.iter() {
        assert!(
            value.bytes().all(|b| (b' '..=b'~').contains(&b)),
            "{name}: {value:?}"
        );
    }
    check_headers(&headers, &decision);
    assert!(headers.get("RateLimit-Policy").is_some());
    assert!(headers.get("RateLimit").is_some());
});
