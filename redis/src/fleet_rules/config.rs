//! [`FleetRulesConfig`]: how a process follows, or an operator publishes, a prefix's fleet
//! rules (poll interval, timeout, pub/sub, the process's name), and its stated bound.

use std::time::Duration;

use crate::keys::validate_name;
use crate::BuildError;

/// How often a follower reads the published version by default (its fallback when an
/// announcement is missed: a subscription down, a proxy without pub/sub).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(400);

/// How long a follower or a publisher waits for each Redis call by default.
pub const DEFAULT_RULES_TIMEOUT: Duration = Duration::from_millis(150);

/// The shortest [`FleetRulesConfig::with_poll_interval`].
const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);
/// The longest [`FleetRulesConfig::with_poll_interval`] and
/// [`FleetRulesConfig::with_timeout`].
const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// How a process follows, or an operator publishes, the fleet rules of one key prefix.
///
/// ```
/// use std::time::Duration;
/// use tollgate_redis::FleetRulesConfig;
/// let config = FleetRulesConfig::new("api")?.with_poll_interval(Duration::from_millis(200))?;
/// assert_eq!(config.bound(), Duration::from_millis(800));
/// assert!(FleetRulesConfig::new("a:b").is_err());
/// # Ok::<(), tollgate_redis::BuildError>(())
/// ```
#[derive(Clone, Debug)]
pub struct FleetRulesConfig {
    pub(super) prefix: String,
    pub(super) poll_interval: Duration,
    pub(super) timeout: Duration,
    pub(super) subscribe: bool,
    pub(super) process: String,
}

impl FleetRulesConfig {
    /// The fleet rules under `prefix` (the prefix of the fleet's stores, by convention):
    /// announcements by pub/sub, a poll every [`DEFAULT_POLL_INTERVAL`], each call given
    /// [`DEFAULT_RULES_TIMEOUT`], this process named `{host}-{pid}`.
    pub fn new(prefix: &str) -> Result<FleetRulesConfig, BuildError> {
        validate_name(prefix)?;
        Ok(FleetRulesConfig {
            prefix: prefix.to_owned(),
            poll_interval: DEFAULT_POLL_INTERVAL,
            timeout: DEFAULT_RULES_TIMEOUT,
            subscribe: true,
            process: default_process_name(),
        })
    }

    /// How often a follower reads the published version (10 ms to an hour).
    pub fn with_poll_interval(mut self, interval: Duration) -> Result<Self, BuildError> {
        if !(MIN_POLL_INTERVAL..=MAX_INTERVAL).contains(&interval) {
            return Err(BuildError::OutOfRange {
                setting: "poll_interval",
                range: "10ms..=1h",
            });
        }
        self.poll_interval = interval;
        Ok(self)
    }

    /// How long each Redis call may take before it counts as failed (1 ms to an hour).
    pub fn with_timeout(mut self, timeout: Duration) -> Result<Self, BuildError> {
        if !(Duration::from_millis(1)..=MAX_INTERVAL).contains(&timeout) {
            return Err(BuildError::OutOfRange {
                setting: "timeout",
                range: "1ms..=1h",
            });
        }
        self.timeout = timeout;
        Ok(self)
    }

    /// Polls only, without subscribing to announcements: for a Redis proxy without
    /// pub/sub. Versions then arrive at the next poll, still within [`bound`](Self::bound).
    pub fn without_pubsub(mut self) -> Self {
        self.subscribe = false;
        self
    }

    /// The name this process reports its version under
    /// ([`FleetRules::running`](super::FleetRules::running)).
    pub fn with_process_name(mut self, name: &str) -> Self {
        name.clone_into(&mut self.process);
        self
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The bound on when a follower applies a published version, while Redis answers:
    /// a poll interval (it may just have polled), then one timeout for each call of the
    /// next round that finds it — subscribing again if the subscription is down,
    /// connecting again if the last poll failed, reading the version, reading the
    /// document. An announcement usually brings it in one round trip. Compiling the rules
    /// comes on top (microseconds per rule). 1 s by default.
    pub fn bound(&self) -> Duration {
        self.poll_interval + 4 * self.timeout
    }
}

/// `{host}-{pid}`, the host from the environment or the kernel.
fn default_process_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "process".to_owned());
    format!("{host}-{}", std::process::id())
}
