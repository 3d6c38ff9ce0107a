//! [`FleetRulesError`]: what went wrong publishing or reading the fleet rules, or starting
//! a follower.

use std::fmt;

use redis::RedisError;

/// What went wrong publishing or reading the fleet rules, or starting a follower.
#[derive(Debug)]
#[non_exhaustive]
pub enum FleetRulesError {
    /// The document was refused before it reached Redis: its rules are wrong, or it has
    /// none. Nothing was published. From
    /// [`FleetRules::publish`](super::FleetRules::publish), a
    /// [`PolicyConfigError`](tollgate::policy::PolicyConfigError) (downcast to read its
    /// path); from [`FleetRules::publish_with`](super::FleetRules::publish_with), the
    /// check's own error.
    Rules(Box<dyn std::error::Error + Send + Sync>),
    /// Redis failed, or did not answer within the timeout: what it said.
    Redis(String),
    /// The follower's thread could not be started.
    Thread(String),
}

impl fmt::Display for FleetRulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FleetRulesError::Rules(e) => write!(f, "rules refused, nothing published: {e}"),
            FleetRulesError::Redis(e) => write!(f, "fleet rules: Redis failed: {e}"),
            FleetRulesError::Thread(e) => {
                write!(f, "fleet rules: cannot start the follower: {e}")
            }
        }
    }
}

impl std::error::Error for FleetRulesError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FleetRulesError::Rules(e) => Some(&**e),
            FleetRulesError::Redis(_) | FleetRulesError::Thread(_) => None,
        }
    }
}

impl From<RedisError> for FleetRulesError {
    fn from(e: RedisError) -> Self {
        FleetRulesError::Redis(e.to_string())
    }
}
