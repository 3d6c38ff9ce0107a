//! [`PolicyConfigError`]: why a policy config was rejected, naming the rule and field.

use std::fmt;

/// A rejected policy config. `path` names the offending rule and field in the config's own
/// terms (`rules[3].limit`, `rules[0].tiers[1].window`); `message` says what is wrong.
/// Displayed as `path: message`.
///
/// ```
/// use tollgate::policy::PolicyConfig;
/// let err = PolicyConfig::from_toml("[[rules]]\nname = \"d\"\nlimit = 0\nwindow = \"1m\"\n")
///     .unwrap_err();
/// assert_eq!(err.to_string(), "rules[0].limit: must be > 0");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyConfigError {
    /// Where: `rules[3].limit`, or `toml` for a syntax or type error.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl PolicyConfigError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> PolicyConfigError {
        PolicyConfigError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for PolicyConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for PolicyConfigError {}
