//! [`EndpointSelector`]: which endpoints a rule is for — one exact name (a path, or a
//! route template such as `/users/{id}` as axum's `MatchedPath` gives it), or every
//! endpoint under a prefix — parsed from a rule's `endpoint` / `prefix` with every form
//! that could never match refused at load.
//!
//! **Precedence** (what [`RuleSet`](super::RuleSet) does with them): a request's endpoint
//! slot takes the rule of the exact selector naming its endpoint if there is one for the
//! request (the client's, else the any-client one), else that of the longest prefix that
//! matches and has one. Rules without an endpoint are the other slot and always apply.

use core::fmt;

/// Which endpoints a rule is for.
///
/// ```
/// use tollgate::policy::EndpointSelector;
/// let users = EndpointSelector::parse("/users/*")?;
/// assert_eq!(users, EndpointSelector::Prefix("/users/".into()));
/// assert!(users.matches("/users/42") && users.matches("/users/{id}"));
/// assert!(!users.matches("/users") && !users.matches("/usersx/1"));
///
/// let template = EndpointSelector::parse("/users/{id}")?;
/// assert!(template.matches("/users/{id}") && !template.matches("/users/42"));
///
/// let api = EndpointSelector::prefix("/api")?;
/// assert!(api.matches("/api") && api.matches("/api/v1/x") && !api.matches("/apix"));
///
/// assert!(EndpointSelector::parse("/users/*/posts").is_err()); // a wildcard mid-path
/// assert!(EndpointSelector::parse("/users/:id").is_err()); // axum 0.7's syntax
/// # Ok::<(), tollgate::policy::SelectorError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointSelector {
    /// This endpoint exactly: a path, a route template as the HTTP layer names endpoints
    /// by default (`/users/{id}`), or any other name an endpoint mapping gives.
    Exact(Box<str>),
    /// Every endpoint that is this prefix or below it, by whole `/`-separated segments:
    /// `/api` matches `/api` and `/api/v1`, not `/apix`; a prefix ending in `/` matches
    /// every endpoint below it (`/users/` matches `/users/42`, not `/users`).
    Prefix(Box<str>),
}

impl EndpointSelector {
    /// A rule's `endpoint`: an exact name, or `…/*` for every endpoint below `…/`.
    ///
    /// # Errors
    ///
    /// [`SelectorError`] for a selector that could never match what it seems to mean: empty,
    /// a `*` anywhere but a trailing `/*` or axum's catch-all (`{*name}`, which ends a
    /// template, after any static text of its segment), a `{param}` that does not close
    /// within its segment, a `:param` segment (axum 0.7's syntax, which axum 0.8's
    /// `MatchedPath` never reports; it writes `{param}`), or a path (one that starts with `/`) holding a query (`?`) or fragment
    /// (`#`), which neither a request's path nor its route template ever does. A name that
    /// does not start with `/` (one an endpoint mapping gives) is otherwise free.
    pub fn parse(endpoint: &str) -> Result<EndpointSelector, SelectorError> {
        if let Some(prefix) = endpoint.strip_suffix("/*") {
            let prefix = format!("{prefix}/");
            check(&prefix, endpoint, true)?;
            return Ok(EndpointSelector::Prefix(prefix.into()));
        }
        check(endpoint, endpoint, false)?;
        Ok(EndpointSelector::Exact(endpoint.into()))
    }

    /// A rule's `prefix`: every endpoint that is `prefix` or below it.
    ///
    /// # Errors
    ///
    /// [`SelectorError`] as for [`parse`](Self::parse); a prefix holds no `*` at all (a
    /// catch-all is a template's last segment: nothing is below it).
    pub fn prefix(prefix: &str) -> Result<EndpointSelector, SelectorError> {
        check(prefix, prefix, true)?;
        Ok(EndpointSelector::Prefix(prefix.into()))
    }

    /// Whether `endpoint` is one this selector is for.
    #[inline]
    pub fn matches(&self, endpoint: &str) -> bool {
        match self {
            EndpointSelector::Exact(name) => **name == *endpoint,
            EndpointSelector::Prefix(prefix) => EndpointSelector::prefix_matches(prefix, endpoint),
        }
    }

    /// Whether `endpoint` is `prefix` or below it, by whole segments.
    #[inline]
    pub(crate) fn prefix_matches(prefix: &str, endpoint: &str) -> bool {
        match endpoint.strip_prefix(prefix) {
            None => false,
            Some(rest) => rest.is_empty() || prefix.ends_with('/') || rest.starts_with('/'),
        }
    }

    /// Whether it names a route template (a `{param}` in a segment): what axum's
    /// `MatchedPath` reports, and never a request's raw path.
    pub(crate) fn is_route_template(&self) -> bool {
        self.as_str().contains('{')
    }

    /// The name or prefix, as the selector holds it.
    pub fn as_str(&self) -> &str {
        match self {
            EndpointSelector::Exact(s) | EndpointSelector::Prefix(s) => s,
        }
    }
}

/// `exact /users/{id}` or `prefix /api/`.
impl fmt::Display for EndpointSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndpointSelector::Exact(s) => write!(f, "exact {s}"),
            EndpointSelector::Prefix(s) => write!(f, "prefix {s}"),
        }
    }
}

/// Refuses `text` (from the selector as `written`; `prefix`: whether it is a prefix) if it
/// could never match.
fn check(text: &str, written: &str, prefix: bool) -> Result<(), SelectorError> {
    let refuse = |reason: &'static str| {
        Err(SelectorError {
            selector: written.to_owned(),
            reason,
        })
    };
    if text.is_empty() {
        return refuse("must not be empty (omit it to match any endpoint)");
    }
    // A path or a route template (a name from an endpoint mapping may be anything else).
    if text.starts_with('/') && text.contains(['?', '#']) {
        return refuse(
            "a request's path and its route template never hold a query (`?`) or a \
             fragment (`#`)",
        );
    }
    let last = text.split('/').count() - 1;
    for (i, segment) in text.split('/').enumerate() {
        if segment.starts_with(':') {
            return refuse(
                "`:param` is axum 0.7's syntax and never matches axum 0.8's route \
                 templates: write `{param}`",
            );
        }
        let opens = segment.matches('{').count();
        let closes = segment.matches('}').count();
        let balanced = match (segment.find('{'), segment.rfind('}')) {
            (None, None) => true,
            (Some(open), Some(close)) => opens == 1 && closes == 1 && close > open + 1,
            _ => false,
        };
        if !balanced {
            return refuse(
                "a route template's parameter is one `{name}` (or `{*name}`) within a \
                 segment",
            );
        }
        if !segment.contains('*') {
            continue;
        }
        // axum's catch-all: `{*name}` ending the last segment of an exact template, after
        // any static text (`/files/{*path}`, `/files/v{*rest}`).
        let catch_all = segment.find("{*").is_some_and(|open| {
            let (before, param) = segment.split_at(open);
            !before.contains('*')
                && param
                    .strip_prefix("{*")
                    .and_then(|rest| rest.strip_suffix('}'))
                    .is_some_and(|name| !name.is_empty() && !name.contains('*'))
        });
        if !catch_all {
            return refuse(
                "a wildcard is only supported as a trailing `/*` (every endpoint below the \
                 prefix; or `prefix = \"...\"`) or as axum's catch-all `{*name}`, which \
                 ends a route",
            );
        }
        if prefix {
            return refuse(
                "a catch-all `{*name}` is the last segment of a route template, so nothing \
                 is below it: name the template with `endpoint`, or the prefix before it",
            );
        }
        if i != last {
            return refuse("axum's catch-all `{*name}` is only ever a route's last segment");
        }
    }
    Ok(())
}

/// An endpoint selector that could never match (see [`EndpointSelector::parse`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SelectorError {
    /// The selector as written.
    pub selector: String,
    /// Why it can never match.
    pub reason: &'static str,
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "endpoint {:?}: {}", self.selector, self.reason)
    }
}

impl std::error::Error for SelectorError {}

#[cfg(test)]
mod tests {
    use super::EndpointSelector::{self, Exact, Prefix};

    #[test]
    fn forms_parse_as_they_read() {
        let ok = |s: &str| EndpointSelector::parse(s).ok();
        assert_eq!(ok("/search"), Some(Exact("/search".into())));
        assert_eq!(ok("/users/{id}"), Some(Exact("/users/{id}".into())));
        assert_eq!(ok("/files/{*path}"), Some(Exact("/files/{*path}".into())));
        // A catch-all after static text in its segment, as axum 0.8 routes it.
        assert_eq!(ok("/files/v{*rest}"), Some(Exact("/files/v{*rest}".into())));
        assert_eq!(ok("hyper"), Some(Exact("hyper".into())));
        assert_eq!(ok("/users/*"), Some(Prefix("/users/".into())));
        assert_eq!(ok("/*"), Some(Prefix("/".into())));
        for bad in [
            "",
            "*",
            "/users*",
            "/users/*/posts",
            "/a/**",
            "/users/:id",
            "/users/{id",
            "/users/id}",
            "/users/{}",
            "/users/{a}{b}",
            "/search?q=1",
            "/a#b",
            "/files/{*path}/x",
            "/users*/{*p}",
            "/files/{*}",
            "/files/{**p}",
            "/files/x*{*p}",
            "/files/{*p}x",
            "/files/{*path}/*",
        ] {
            assert_eq!(ok(bad), None, "{bad:?} accepted");
        }
        // A name from an endpoint mapping (not a path) may hold what a path cannot.
        assert_eq!(ok("search?v2"), Some(Exact("search?v2".into())));
        assert!(EndpointSelector::prefix("/api/*").is_err());
        assert!(EndpointSelector::prefix("/static/{*path}").is_err());
        assert!(EndpointSelector::prefix("/api?").is_err());
        assert!(EndpointSelector::prefix("").is_err());
    }

    #[test]
    fn prefixes_match_whole_segments() {
        let p = |s: &str| Prefix(s.into());
        assert!(p("/api").matches("/api"));
        assert!(p("/api").matches("/api/v1"));
        assert!(!p("/api").matches("/apix"));
        assert!(p("/api/").matches("/api/v1"));
        assert!(!p("/api/").matches("/api"));
        assert!(p("/").matches("/anything"));
        assert!(!Exact("/api".into()).matches("/api/v1"));
    }
}
