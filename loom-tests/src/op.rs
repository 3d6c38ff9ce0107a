//! [`Op`]: one operation a model thread performs.

use tollgate_core::Nanos;

/// One operation of a model thread: a check (consumes when admitted) or a peek (never
/// writes) of a cost at a given `now`, for a key (single-key subjects ignore it; keyed ones
/// use it).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// The key (0 unless set with [`Op::key`]).
    pub key: u64,
    /// The caller's clock reading, in ns.
    pub now: u64,
    /// Permits asked for.
    pub cost: u32,
    /// A check (`true`) or a peek (`false`).
    pub commit: bool,
}

impl Op {
    /// A check of `cost` at `now`.
    pub const fn check(now: u64, cost: u32) -> Op {
        Op {
            key: 0,
            now,
            cost,
            commit: true,
        }
    }

    /// A peek of `cost` at `now`.
    pub const fn peek(now: u64, cost: u32) -> Op {
        Op {
            key: 0,
            now,
            cost,
            commit: false,
        }
    }

    /// The same operation on `key`.
    pub const fn key(mut self, key: u64) -> Op {
        self.key = key;
        self
    }

    /// `now` as [`Nanos`].
    pub const fn now(&self) -> Nanos {
        Nanos::new(self.now)
    }

    /// The cost.
    pub const fn cost(&self) -> u32 {
        self.cost
    }

    /// Whether an admission is recorded (a check) or not (a peek).
    pub const fn commits(&self) -> bool {
        self.commit
    }
}
