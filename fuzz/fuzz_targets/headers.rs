//! Header rendering on arbitrary decisions, names, quotas and windows, through the one
//! structured-field writer every header style uses:
//!
//! - `RateLimitHeaders::from_decision`: never panics, names outside printable ASCII
//!   refused (never in a header value), `Retry-After` never 0 on a deny and never earlier
//!   than the decision's `retry_after`, legacy numbers equal to the decision's;
//! - the same name on a hand-built tier label (as a decorator or custom store may build
//!   one: config validation keeps such names out of a `Policy`), through
//!   `RateLimitHeaders::from_policy_decision` and every `tollgate_http::HeaderStyle`:
//!   the same fields in every style, sf-strings that parse back as the name with `?` for
//!   each character an sf-string cannot hold, every value printable ASCII.
#![no_main]

use std::borrow::Cow;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate::policy::{PolicyDecision, RateLimitHeaders, RuleId, TierLabel};
use tollgate_core::{Decision, Nanos};
use tollgate_fuzz::{check_header_styles, check_headers};

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
    partition: String,
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
    let label = TierLabel {
        rule: RuleId(0),
        rule_name: Cow::Borrowed("fuzz"),
        name: Cow::Owned(input.name.clone()),
        quota: input.quota,
        window: Nanos::new(input.window),
        shared: false,
    };
    let from_tier = every_style(label, decision, &input.partition);
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
    // One writer: a name both accept renders alike from a name and from a tier.
    assert_eq!(headers, from_tier);
});

/// Checks every header style on the one-tier decision `label` and `decision` make
/// (see [`check_header_styles`]); returns what `RateLimitHeaders` rendered.
fn every_style(label: TierLabel, decision: Decision, partition: &str) -> RateLimitHeaders {
    // A label lives only for this input (leaked ones would add up over a run).
    let label = Box::into_raw(Box::new(label));
    let rendered = {
        // SAFETY: `label` comes from `Box::into_raw` just above and is freed only after
        // this block. The reference does not leave the block: the decision holding it is
        // dropped at the block's end, and what is rendered from it is owned.
        let label: &'static TierLabel = unsafe { &*label };
        let tiered = PolicyDecision::combine([(label, decision)]);
        check_header_styles(&tiered, partition);
        RateLimitHeaders::from_policy_decision(&tiered)
    };
    // SAFETY: `label` comes from `Box::into_raw` above, and nothing refers to it any more
    // (the block that borrowed it has ended; `rendered` owns its strings).
    drop(unsafe { Box::from_raw(label) });
    rendered
}
