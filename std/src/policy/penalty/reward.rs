//! [`RewardConfig`]: the other half of [`AdaptivePenalty`](super::AdaptivePenalty): a
//! client that stays within its limits has them raised, step by step, up to a cap.

use tollgate_core::Nanos;

use crate::policy::PenaltyConfigError;

/// After `quiet_windows` windows of `window` in which a client was active and never
/// denied by its own tiers, its limits are multiplied by `factor`; after as many more,
/// by `factor` again, up to `max_factor`. Its next deny takes the whole reward away.
///
/// Standing is earned by being active: each `window` in which the client sends a
/// request adds one window of standing, each window without one takes one away, so a
/// client that goes quiet loses its reward as slowly as it earned it (the window of a
/// client's first request counts once it is over). A client the
/// penalty's store has no state for (new, or gone long enough for its state to expire)
/// starts with none.
///
/// ```
/// use tollgate::policy::RewardConfig;
/// use tollgate::Nanos;
/// let reward = RewardConfig {
///     window: Nanos::from_secs(60),
///     quiet_windows: 10,
///     factor: 2,
///     max_factor: 8,
/// };
/// assert!(reward.validate().is_ok());
/// assert_eq!(reward.steps(), 3); // 2, 4, 8
/// assert_eq!(reward.multiplier(0), 1);
/// assert_eq!(reward.multiplier(2), 4);
/// assert_eq!(reward.multiplier(9), 8);
/// assert_eq!(
///     RewardConfig { factor: 1, ..reward }.validate(),
///     Err(tollgate::policy::PenaltyConfigError::RewardFactorTooSmall)
/// );
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RewardConfig {
    /// The unit standing is counted in (e.g. the rules' window).
    pub window: Nanos,
    /// Active windows without a deny that earn one step (≥ 1).
    pub quiet_windows: u32,
    /// What each step multiplies the limits by (≥ 2).
    pub factor: u32,
    /// The most the limits are ever multiplied by (≥ `factor`).
    pub max_factor: u32,
}

impl RewardConfig {
    /// Checks the numbers; the error names the field.
    pub fn validate(&self) -> Result<(), PenaltyConfigError> {
        if self.window == Nanos::ZERO {
            return Err(PenaltyConfigError::ZeroRewardWindow);
        }
        if self.quiet_windows == 0 {
            return Err(PenaltyConfigError::ZeroQuietWindows);
        }
        if self.factor < 2 {
            return Err(PenaltyConfigError::RewardFactorTooSmall);
        }
        if self.max_factor < self.factor {
            return Err(PenaltyConfigError::MaxFactorBelowFactor);
        }
        // The standing's bucket holds `burst()` windows: it must fit the core's horizon.
        let held = u128::from(self.burst()) * u128::from(self.window.as_u64());
        if held > u128::from(Nanos::MAX_HORIZON.as_u64()) {
            return Err(PenaltyConfigError::RewardTooLong {
                max: Nanos::MAX_HORIZON,
            });
        }
        Ok(())
    }

    /// How many steps reach `max_factor` (the first step whose multiplier reaches it).
    pub fn steps(&self) -> u32 {
        let mut steps = 0;
        let mut m = 1u64;
        while m < u64::from(self.max_factor) {
            m = m.saturating_mul(u64::from(self.factor.max(2)));
            steps += 1;
        }
        steps
    }

    /// The multiplier at `step` steps earned: `factor^step`, at most `max_factor`.
    pub fn multiplier(&self, step: u32) -> u32 {
        let mut m = 1u64;
        for _ in 0..step.min(self.steps()) {
            m = m.saturating_mul(u64::from(self.factor));
        }
        // Capped at `max_factor`, a `u32`.
        u32::try_from(m.min(u64::from(self.max_factor))).unwrap_or(self.max_factor)
    }

    /// The windows of standing the store keeps at most: every step's, the two a window's
    /// activity adds, and two more so that standing at the top stays there while the
    /// client stays active (its marks are refused while the store is full).
    pub(super) fn burst(&self) -> u64 {
        u64::from(self.steps()) * u64::from(self.quiet_windows) + 4
    }

    /// The step earned by `debt`, the standing's busy time: the client's `k`-th active
    /// window leaves a debt in `(k·window, (k+1)·window]`, so `⌈debt / window⌉ − 2` windows
    /// are complete; each whole run of `quiet_windows` of them is a step, up to the top.
    pub(super) fn step(&self, debt: Nanos) -> u32 {
        let window = self.window.as_u64().max(1);
        let complete = debt.as_u64().div_ceil(window).saturating_sub(2);
        let steps = complete / u64::from(self.quiet_windows.max(1));
        u32::try_from(steps).unwrap_or(u32::MAX).min(self.steps())
    }
}
