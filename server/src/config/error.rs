//! [`ConfigError`]: a rules config refused at load, naming where: the file, the domain,
//! the place in the domain's descriptor tree and the field
//! (`rules.yaml: domain "mongo_cps": descriptors[0].rate_limit.unit: missing`).

use std::fmt;

/// A config refused at load. Displayed as `file: domain "name": path: message`, each part
/// present when known (a file that does not parse may not have told its domain yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConfigError {
    /// The file (or the name the caller gave the document).
    source: Box<str>,
    /// The file's domain, once read.
    domain: Option<Box<str>>,
    /// The field, as a path in the file: `descriptors[0].descriptors[1].rate_limit.unit`.
    path: Option<Box<str>>,
    /// What is wrong.
    message: String,
}

impl ConfigError {
    /// An error about the document `source` as a whole.
    pub(crate) fn new(source: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            source: source.into(),
            domain: None,
            path: None,
            message: message.into(),
        }
    }

    /// The same error, within `domain`.
    pub(super) fn in_domain(mut self, domain: &str) -> ConfigError {
        self.domain = Some(domain.into());
        self
    }

    /// The same error, about the field at `path`.
    pub(super) fn at(mut self, path: &str) -> ConfigError {
        self.path = Some(path.into());
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.source)?;
        if let Some(domain) = &self.domain {
            write!(f, "domain {domain:?}: ")?;
        }
        if let Some(path) = &self.path {
            write!(f, "{path}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Where in the config a check is: the file and its domain. Makes the errors there.
#[derive(Copy, Clone, Debug)]
pub(super) struct Place<'a> {
    /// The file.
    pub(super) source: &'a str,
    /// Its domain.
    pub(super) domain: &'a str,
}

impl Place<'_> {
    /// An error about the field at `path` of this file's domain.
    pub(super) fn error(&self, path: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::new(self.source, message)
            .in_domain(self.domain)
            .at(path)
    }
}
