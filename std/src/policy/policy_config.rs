//! [`PolicyConfig`]: the whole rules file, parsed from TOML.

use serde::Deserialize;

use super::{PolicyConfigError, RuleConfig, RuleSet};

/// A rules file before validation. Parse with [`from_toml`](Self::from_toml) (or build it
/// in code), then hand it to [`Policy`](super::Policy), which validates it into a
/// [`RuleSet`].
///
/// ```
/// use tollgate::policy::PolicyConfig;
/// let config = PolicyConfig::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 100
///     window = "1m"
/// "#)?;
/// assert_eq!(config.rules.len(), 1);
/// # Ok::<(), tollgate::policy::PolicyConfigError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PolicyConfig {
    /// The most keys (clients) one tier keeps state for; memory is bounded by it. Default
    /// 100 000.
    #[serde(default)]
    pub capacity: Option<usize>,
    /// The rules.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
}

impl PolicyConfig {
    /// Parses TOML and validates it (a config that parses but cannot be built, such as a
    /// zero limit, is rejected here too, with the rule and field named).
    pub fn from_toml(text: &str) -> Result<PolicyConfig, PolicyConfigError> {
        let config: PolicyConfig =
            toml::from_str(text).map_err(|e| PolicyConfigError::new("toml", e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every rule and tier without building any state.
    pub fn validate(&self) -> Result<(), PolicyConfigError> {
        RuleSet::compile(self).map(|_| ())
    }

    /// Adds a rule.
    pub fn rule(mut self, rule: RuleConfig) -> PolicyConfig {
        self.rules.push(rule);
        self
    }
}
