//! [`Contender`]: who is being measured in a case — tollgate, governor, or the floor.

/// One of the three columns of every comparison.
///
/// ```
/// use tollgate_bench::Contender;
/// assert_eq!(Contender::ALL.map(Contender::name), ["tollgate", "governor", "floor"]);
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Contender {
    /// This project.
    Tollgate,
    /// The `governor` crate, the established Rust rate limiter.
    Governor,
    /// The same work with no library: clock read, load, compare-and-swap.
    Floor,
}

impl Contender {
    /// Every contender, in table order.
    pub const ALL: [Contender; 3] = [Contender::Tollgate, Contender::Governor, Contender::Floor];

    /// The column name (also the JSON field name).
    pub const fn name(self) -> &'static str {
        match self {
            Contender::Tollgate => "tollgate",
            Contender::Governor => "governor",
            Contender::Floor => "floor",
        }
    }

    /// Position in [`Contender::ALL`].
    pub const fn index(self) -> usize {
        match self {
            Contender::Tollgate => 0,
            Contender::Governor => 1,
            Contender::Floor => 2,
        }
    }
}
