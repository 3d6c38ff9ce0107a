//! [`Op`]: one operation a model thread performs.

use tollgate_core::Nanos;

/// One operation of a model thread: a check (consumes when admitted) or a peek (never
/// writes), at a given `now` with a given cost.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `check_at(now, cost)`.
    Check {
        /// The caller's clock reading, in ns.
        now: u64,
        /// Permits asked for.
        cost: u32,
    },
    /// `peek_at(now, cost)`.
    Peek {
        /// The caller's clock reading, in ns.
        now: u64,
        /// Permits asked about.
        cost: u32,
    },
}

impl Op {
    /// A check of `cost` at `now`.
    pub const fn check(now: u64, cost: u32) -> Op {
        Op::Check { now, cost }
    }

    /// A peek of `cost` at `now`.
    pub const fn peek(now: u64, cost: u32) -> Op {
        Op::Peek { now, cost }
    }

    /// `now` as [`Nanos`].
    pub const fn now(&self) -> Nanos {
        match *self {
            Op::Check { now, .. } | Op::Peek { now, .. } => Nanos::new(now),
        }
    }

    /// The cost.
    pub const fn cost(&self) -> u32 {
        match *self {
            Op::Check { cost, .. } | Op::Peek { cost, .. } => cost,
        }
    }

    /// Whether an admission is recorded (a check) or not (a peek).
    pub const fn commits(&self) -> bool {
        matches!(self, Op::Check { .. })
    }
}
