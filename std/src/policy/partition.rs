//! [`Partition`]: how a rule splits its state among requests.

use serde::Deserialize;

/// Whose requests share one bucket under a rule. In TOML: `per = "client"` (the default)
/// or `per = "global"`.
///
/// - `Client`: every client has its own state under the rule. An endpoint rule with
///   `per = "client"` is a per-(client, endpoint) limit: each client gets its own 10/min on
///   `/search`.
/// - `Global`: one state shared by every request the rule matches (protects a backend:
///   `/export` takes 100/min in total, whoever calls).
///
/// ```
/// use tollgate::policy::Partition;
/// assert_eq!(Partition::default(), Partition::Client);
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Partition {
    /// One state per client.
    #[default]
    Client,
    /// One state for all matching requests.
    Global,
}
