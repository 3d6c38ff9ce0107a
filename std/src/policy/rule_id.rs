//! [`RuleId`]: a rule's stable number within one policy.

/// A rule's number within one [`Policy`](super::Policy): assigned by name the first time a
/// rule is loaded and kept across reloads, so metrics indexed by it stay meaningful.
///
/// ```
/// use tollgate::policy::RuleId;
/// assert_eq!(RuleId(3).index(), 3);
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub u32);

impl RuleId {
    /// As an index.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}
