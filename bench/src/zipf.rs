//! [`Zipf`]: a Zipf-distributed sampler over ranks `0..n`, used to build skewed key orders
//! up front (rank 0 is the hottest key).

use crate::SplitMix64;

/// Zipf(`n`, `s`): rank `k` (0-based) is drawn with probability ∝ `1 / (k + 1)^s`.
/// Sampling is a binary search in the precomputed cumulative distribution.
///
/// ```
/// use tollgate_bench::{SplitMix64, Zipf};
/// let zipf = Zipf::new(1000, 1.0);
/// let mut rng = SplitMix64::new(3);
/// let draws: Vec<usize> = (0..10_000).map(|_| zipf.sample(&mut rng)).collect();
/// assert!(draws.iter().all(|&k| k < 1000));
/// // The hottest rank is drawn far more often than a cold one.
/// let hot = draws.iter().filter(|&&k| k == 0).count();
/// let cold = draws.iter().filter(|&&k| k == 999).count();
/// assert!(hot > 10 * cold.max(1));
/// ```
#[derive(Clone, Debug)]
pub struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    /// The distribution over `n ≥ 1` ranks with exponent `s`.
    pub fn new(n: usize, s: f64) -> Zipf {
        let mut total = 0.0;
        let mut cumulative = Vec::with_capacity(n.max(1));
        for k in 0..n.max(1) {
            total += 1.0 / ((k + 1) as f64).powf(s);
            cumulative.push(total);
        }
        for c in &mut cumulative {
            *c /= total;
        }
        Zipf { cumulative }
    }

    /// One rank in `0..n`.
    pub fn sample(&self, rng: &mut SplitMix64) -> usize {
        let u = rng.next_f64();
        let rank = self.cumulative.partition_point(|&c| c <= u);
        rank.min(self.cumulative.len() - 1)
    }
}
