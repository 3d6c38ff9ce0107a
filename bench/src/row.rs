//! [`Row`]: one measured case — a figure per contender — and its ratios.

use crate::{Contender, Unit};

/// One case's result: the median figure per contender, `None` where a contender has no
/// such case.
///
/// ```
/// use tollgate_bench::{Contender, Row, Unit};
/// let row = Row { name: "x".into(), unit: Unit::Ns, values: [Some(10.0), Some(40.0), None] };
/// assert_eq!(row.get(Contender::Governor), Some(40.0));
/// assert_eq!(row.ratio(Contender::Governor), Some(0.25));
/// assert_eq!(row.ratio(Contender::Floor), None);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The case name (stable: the JSON and docs/benchmarks.md refer to it).
    pub name: String,
    /// What the figures measure.
    pub unit: Unit,
    /// Figures in [`Contender::ALL`] order.
    pub values: [Option<f64>; 3],
}

impl Row {
    /// `contender`'s figure.
    pub fn get(&self, contender: Contender) -> Option<f64> {
        self.values[contender.index()]
    }

    /// tollgate's figure divided by `other`'s (below 1 means tollgate is faster/smaller).
    pub fn ratio(&self, other: Contender) -> Option<f64> {
        match (self.get(Contender::Tollgate), self.get(other)) {
            (Some(t), Some(o)) if o > 0.0 => Some(t / o),
            _ => None,
        }
    }
}
