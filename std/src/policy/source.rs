//! [`ReloadToml`]: what a rule source reloads — a [`Policy`], or anything else that takes
//! a TOML rules document. The watched file ([`RulesFile`](super::RulesFile), feature
//! `watch`) and the fleet source of `tollgate-redis` (`FleetRules`) feed one.

use tollgate_core::Clock;

use super::{Policy, PolicyConfigError, ReloadReport, Store};

/// What a rule source reloads: a [`Policy`] over any clock and store, or anything else
/// that takes a TOML rules document.
pub trait ReloadToml {
    /// Replaces the rules by those of `text` ([`Policy::reload_toml`]); on error keeps the
    /// rules in force.
    fn reload_toml(&self, text: &str) -> Result<ReloadReport, PolicyConfigError>;
}

impl<C: Clock, S: Store> ReloadToml for Policy<C, S> {
    fn reload_toml(&self, text: &str) -> Result<ReloadReport, PolicyConfigError> {
        Policy::reload_toml(self, text)
    }
}
