//! [`check_decision`]: the invariants every decision satisfies, whatever the algorithm.

use tollgate_core::Decision;

/// Asserts the contract of [`Decision`] for an algorithm whose limit is `limit`:
/// `limit` reported as configured, `remaining ≤ limit`, `retry_after == 0` when allowed and
/// `≥ 1` when denied, and no `delay` on a deny.
pub fn check_decision(decision: &Decision, limit: u64) {
    assert_eq!(decision.limit, limit, "limit reported: {decision:?}");
    assert!(
        decision.remaining <= limit,
        "remaining above the limit: {decision:?}"
    );
    if decision.allowed {
        assert_eq!(
            decision.retry_after.as_u64(),
            0,
            "allowed with a retry_after: {decision:?}"
        );
    } else {
        assert!(
            decision.retry_after.as_u64() >= 1,
            "denied with retry_after 0: {decision:?}"
        );
        assert_eq!(
            decision.delay.as_u64(),
            0,
            "denied with a delay: {decision:?}"
        );
    }
}
