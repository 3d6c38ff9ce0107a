//! [`AlgorithmKind`]: the algorithm as a config value (the seed's factory).

use serde::Deserialize;

/// Which core algorithm a tier runs. In TOML: `algorithm = "gcra"` (the default),
/// `"token_bucket"`, `"leaky_bucket"`, `"fixed_window"`, `"sliding_window_counter"` or
/// `"sliding_window_log"`.
///
/// | kind | `limit` / `window` mean | extra fields |
/// |---|---|---|
/// | `gcra` | `limit` per `window`, evenly spaced | `burst` (default `limit`) |
/// | `token_bucket` | refill `limit` tokens per `window` | `burst` = capacity (default `limit`) |
/// | `leaky_bucket` | drain `limit` per `window` (a shaper: admitted requests carry a `delay`) | `queue` (default `limit − 1`) |
/// | `fixed_window` | `limit` per aligned `window` | — |
/// | `sliding_window_counter` | about `limit` per sliding `window` | — |
/// | `sliding_window_log` | exactly `limit` per sliding `window` (one timestamp per permit, at most 65 536) | — |
///
/// ```
/// use tollgate::policy::AlgorithmKind;
/// assert_eq!(AlgorithmKind::default(), AlgorithmKind::Gcra);
/// assert_eq!(AlgorithmKind::SlidingWindowLog.as_str(), "sliding_window_log");
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AlgorithmKind {
    /// Generic cell rate algorithm.
    #[default]
    Gcra,
    /// Token bucket.
    TokenBucket,
    /// Leaky bucket as a shaper.
    LeakyBucket,
    /// Fixed window.
    FixedWindow,
    /// Sliding window counter.
    SlidingWindowCounter,
    /// Sliding window log.
    SlidingWindowLog,
}

impl AlgorithmKind {
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            AlgorithmKind::Gcra => "gcra",
            AlgorithmKind::TokenBucket => "token_bucket",
            AlgorithmKind::LeakyBucket => "leaky_bucket",
            AlgorithmKind::FixedWindow => "fixed_window",
            AlgorithmKind::SlidingWindowCounter => "sliding_window_counter",
            AlgorithmKind::SlidingWindowLog => "sliding_window_log",
        }
    }
}
