//! What a policy tells the operator about its reloads, through the kept facades: a
//! `tracing` event (feature `tracing`, on by default) and a `metrics` counter and gauge
//! (feature `metrics`), both compiled out without their feature.
//!
//! | event | `tracing` | `metrics` |
//! |---|---|---|
//! | a policy built | — | `tollgate_policy_rules` (gauge), so it shows before any reload |
//! | a reload applied | `info`: the generation now in force, the rules in it, what changed ([`ReloadReport`]'s words) | `tollgate_policy_reloads_total{outcome="applied"}`; `tollgate_policy_rules` (gauge) |
//! | a reload refused (the rules in force are kept) | `warn`: why | `tollgate_policy_reloads_total{outcome="refused"}` |

use super::{PolicyConfigError, ReloadReport};

/// Reports a policy built with `rules` rules.
pub(super) fn built(rules: usize) {
    #[cfg(feature = "metrics")]
    {
        // Precision: a rule count is far below 2^52.
        #[allow(clippy::cast_precision_loss)]
        metrics::gauge!("tollgate_policy_rules").set(rules as f64);
    }
    let _ = rules;
}

/// Reports the outcome of a reload: `Ok` with the generation now in force and how many
/// rules it has, or the error that refused it.
pub(super) fn reloaded(outcome: Result<(&ReloadReport, u64, usize), &PolicyConfigError>) {
    match outcome {
        Ok((report, generation, rules)) => {
            #[cfg(feature = "tracing")]
            tracing::info!(
                generation,
                rules,
                changes = %report,
                "tollgate: rules reloaded"
            );
            #[cfg(feature = "metrics")]
            {
                metrics::counter!("tollgate_policy_reloads_total", "outcome" => "applied")
                    .increment(1);
                // Precision: a rule count is far below 2^52.
                #[allow(clippy::cast_precision_loss)]
                metrics::gauge!("tollgate_policy_rules").set(rules as f64);
            }
            let _ = (report, generation, rules);
        }
        Err(error) => {
            #[cfg(feature = "tracing")]
            tracing::warn!(%error, "tollgate: rules reload refused; the rules in force are kept");
            #[cfg(feature = "metrics")]
            metrics::counter!("tollgate_policy_reloads_total", "outcome" => "refused").increment(1);
            let _ = error;
        }
    }
}
