//! [`ReferenceModel`]: one interface over `tollgate_core::reference`'s plain models.

use tollgate_core::reference::{
    FixedWindowModel, GcraModel, LeakyBucketModel, SlidingWindowCounterModel, SlidingWindowLogModel,
};

use tollgate_core::{Decision, InsufficientCapacity};

/// The common shape of the reference models (each has an inherent `check` method).
pub trait ReferenceModel: Clone + Send + Sync + 'static {
    /// Checks `cost` at `now`; a peek when `commit` is false.
    fn check(
        &mut self,
        now: u64,
        cost: u32,
        commit: bool,
    ) -> Result<Decision, InsufficientCapacity>;
}

macro_rules! reference_model {
    ($($model:ty),* $(,)?) => {$(
        impl ReferenceModel for $model {
            fn check(&mut self, now: u64, cost: u32, commit: bool) -> Result<Decision, InsufficientCapacity> {
                <$model>::check(self, now, cost, commit)
            }
        }
    )*};
}

reference_model!(
    GcraModel,
    LeakyBucketModel,
    FixedWindowModel,
    SlidingWindowCounterModel,
    SlidingWindowLogModel,
);
