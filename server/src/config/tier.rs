//! [`Tier`]: one tollgate tier a limit compiles to, and where in the YAML each of its
//! fields came from (so that tollgate's verdict on a field is reported at that field).

use serde::Serialize;

/// One tier of a limit's tollgate rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(super) struct Tier {
    /// Its name in headers; `None`: tollgate's default (the rule's name, `rule.N` after
    /// the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) name: Option<Box<str>>,
    /// Permits per window.
    pub(super) limit: u64,
    /// The window, as tollgate's duration parser reads it.
    pub(super) window: Box<str>,
    /// tollgate's algorithm name.
    pub(super) algorithm: &'static str,
    /// GCRA's burst or the token bucket's capacity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) burst: Option<u64>,
    /// Which form of `rate_limit` it was written in.
    #[serde(skip)]
    pub(super) form: Form,
}

/// The form of `rate_limit` a tier was written in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// Envoy's `unit` and `requests_per_unit`.
    Envoy,
    /// tollgate's `limit`, `window`, `algorithm`, `burst`.
    Single,
    /// `tiers[i]`.
    Listed(usize),
}

/// tollgate's algorithms a service answer can carry, as its rules file names them (not
/// the leaky bucket: its admissions come with a delay to wait, which Envoy's answer has no
/// field for).
pub(super) const ALGORITHMS: [&str; 5] = [
    "gcra",
    "token_bucket",
    "fixed_window",
    "sliding_window_counter",
    "sliding_window_log",
];

impl Form {
    /// The YAML path (under the descriptor) of the field that set tollgate's tier field
    /// `field` (`limit`, `window`, `algorithm`, `burst`, `name`; a leaky bucket's `queue`
    /// is its default from `limit`).
    pub(super) fn field(self, field: &str) -> String {
        match self {
            Form::Envoy => match field {
                "limit" | "queue" => "rate_limit.requests_per_unit".to_owned(),
                "window" => "rate_limit.unit".to_owned(),
                _ => "rate_limit".to_owned(),
            },
            Form::Single => match field {
                "queue" => "rate_limit.limit".to_owned(),
                "name" => "rate_limit".to_owned(),
                other => format!("rate_limit.{other}"),
            },
            Form::Listed(i) => match field {
                "queue" => format!("rate_limit.tiers[{i}].limit"),
                other => format!("rate_limit.tiers[{i}].{other}"),
            },
        }
    }
}
