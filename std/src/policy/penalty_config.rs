//! [`PenaltyConfig`]: when and how hard the adaptive penalty strikes.

use tollgate_core::Nanos;

/// After `denials` denied requests within `period`, a client's limits are divided by
/// `divisor` for `cooldown`, then restored.
///
/// ```
/// use tollgate::policy::PenaltyConfig;
/// use tollgate::Nanos;
/// let config = PenaltyConfig {
///     denials: 5,
///     period: Nanos::from_secs(60),
///     divisor: 4,
///     cooldown: Nanos::from_secs(300),
/// };
/// assert!(config.validate().is_ok());
/// assert!(PenaltyConfig { divisor: 1, ..config }.validate().is_err());
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PenaltyConfig {
    /// Denials that trigger the penalty (≥ 1).
    pub denials: u32,
    /// The window the denials are counted in (fixed windows).
    pub period: Nanos,
    /// The limit divisor while penalized (≥ 2): each request costs `divisor` permits.
    pub divisor: u32,
    /// How long the penalty lasts.
    pub cooldown: Nanos,
}

impl PenaltyConfig {
    /// Checks the numbers; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.denials == 0 {
            return Err("denials: must be > 0".into());
        }
        if self.period == Nanos::ZERO {
            return Err("period: must be > 0".into());
        }
        if self.divisor < 2 {
            return Err("divisor: must be >= 2".into());
        }
        if self.cooldown == Nanos::ZERO {
            return Err("cooldown: must be > 0".into());
        }
        Ok(())
    }
}
