//! [`PenaltyConfig`]: when and how hard the adaptive penalty strikes, and
//! [`PenaltyConfigError`]: which of its numbers is wrong.

use core::fmt;

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
/// assert_eq!(
///     PenaltyConfig { divisor: 1, ..config }.validate(),
///     Err(tollgate::policy::PenaltyConfigError::DivisorTooSmall)
/// );
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
    pub fn validate(&self) -> Result<(), PenaltyConfigError> {
        if self.denials == 0 {
            return Err(PenaltyConfigError::ZeroDenials);
        }
        if self.period == Nanos::ZERO {
            return Err(PenaltyConfigError::ZeroPeriod);
        }
        if self.divisor < 2 {
            return Err(PenaltyConfigError::DivisorTooSmall);
        }
        if self.cooldown == Nanos::ZERO {
            return Err(PenaltyConfigError::ZeroCooldown);
        }
        Ok(())
    }
}

/// Why a [`PenaltyConfig`] was rejected; its `Display` names the field.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PenaltyConfigError {
    /// `denials` is zero: every client would be penalized at once.
    ZeroDenials,
    /// `period` is zero.
    ZeroPeriod,
    /// `divisor` is below 2: a penalty that reduces nothing.
    DivisorTooSmall,
    /// `cooldown` is zero.
    ZeroCooldown,
    /// `denials` per `period` does not fit the denial counter's window layout.
    DenialsTooMany {
        /// The most denials this period can count.
        max: u64,
    },
    /// More clients than a keyed table can hold
    /// ([`AdaptivePenalty::with_capacity`](super::AdaptivePenalty::with_capacity)).
    CapacityTooLarge {
        /// The most clients accepted.
        max: usize,
    },
}

impl fmt::Display for PenaltyConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PenaltyConfigError::ZeroDenials => f.write_str("denials: must be > 0"),
            PenaltyConfigError::ZeroPeriod => f.write_str("period: must be > 0"),
            PenaltyConfigError::DivisorTooSmall => f.write_str("divisor: must be >= 2"),
            PenaltyConfigError::ZeroCooldown => f.write_str("cooldown: must be > 0"),
            PenaltyConfigError::DenialsTooMany { max } => {
                write!(f, "denials: at most {max} for this period")
            }
            PenaltyConfigError::CapacityTooLarge { max } => {
                write!(f, "capacity: at most {max} clients")
            }
        }
    }
}

impl std::error::Error for PenaltyConfigError {}
