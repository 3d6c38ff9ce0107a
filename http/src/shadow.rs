//! [`ShadowSplit`]: rules marked `shadow = true` (or named) split off into a policy of
//! their own, which the layer checks and reports but never lets block.

use tollgate::policy::{PolicyConfig, PolicyConfigError};

/// A rules file split in two: the rules that are enforced and the *shadow* rules, which
/// the layer ([`RateLimitLayer::shadow`](super::RateLimitLayer::shadow)) checks on every
/// admitted request and counts, but never lets deny, and keeps out of the responses'
/// headers unless [`shadow_headers`](super::RateLimitLayer::shadow_headers) asks for them.
/// Use it to try a new limit on live traffic before enforcing it.
///
/// In TOML, a rule is a shadow rule with `shadow = true` (a key only this function
/// understands: the plain [`PolicyConfig`] parser rejects it).
///
/// Each half is matched on its own: a shadow rule for one client does not take the place
/// of the enforced default rule for that client, it is checked alongside it.
///
/// ```
/// use tollgate_http::ShadowSplit;
/// let split = ShadowSplit::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 100
///     window = "1m"
///
///     [[rules]]
///     name = "search-trial"
///     endpoint = "/search"
///     limit = 5
///     window = "1m"
///     shadow = true
/// "#)?;
/// assert_eq!(split.enforced.rules.len(), 1);
/// assert_eq!(split.shadow.rules[0].name, "search-trial");
/// # Ok::<(), tollgate::policy::PolicyConfigError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShadowSplit {
    /// The rules that admit and deny.
    pub enforced: PolicyConfig,
    /// The rules that are only reported.
    pub shadow: PolicyConfig,
}

impl ShadowSplit {
    /// Parses a rules file in which rules may carry `shadow = true`, and validates both
    /// halves.
    ///
    /// # Errors
    ///
    /// The text is not TOML of a rules file, a rule's `shadow` is not a boolean, or a
    /// half is refused as [`PolicyConfig::validate`] refuses it (its rules named by their
    /// places in the file).
    pub fn from_toml(text: &str) -> Result<ShadowSplit, PolicyConfigError> {
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| PolicyConfigError::new("toml", e.to_string()))?;
        let mut shadow_names = Vec::new();
        if let Some(toml::Value::Array(rules)) = table.get_mut("rules") {
            for (i, rule) in rules.iter_mut().enumerate() {
                let toml::Value::Table(rule) = rule else {
                    continue;
                };
                match rule.remove("shadow") {
                    None | Some(toml::Value::Boolean(false)) => {}
                    Some(toml::Value::Boolean(true)) => {
                        let name = rule.get("name").and_then(toml::Value::as_str);
                        shadow_names.push(name.unwrap_or_default().to_owned());
                    }
                    Some(_) => {
                        return Err(PolicyConfigError::new(
                            format!("rules[{i}].shadow"),
                            "must be true or false",
                        ))
                    }
                }
            }
        }
        let config: PolicyConfig = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| PolicyConfigError::new("toml", e.to_string()))?;
        let names: Vec<&str> = shadow_names.iter().map(String::as_str).collect();
        let split = ShadowSplit::by_name(config, &names);
        // Both halves checked, the error first in the file reported (as a check of the
        // whole file would, its rules in one pass).
        match (split.enforced.validate(), split.shadow.validate()) {
            (Ok(()), Ok(())) => Ok(split),
            (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
            (Err(a), Err(b)) => Err(if rule_place(&b) < rule_place(&a) {
                b
            } else {
                a
            }),
        }
    }

    /// Splits `config`: the rules named in `names` are the shadow rules. Each half is the
    /// whole file but for the other half's rules: its `capacity`, its `launder_guard`, and
    /// its `[[allow]]` and `[[deny]]` lists, which decide a request before any rule in
    /// both halves (a banned client is refused, an allow-listed one is never limited nor
    /// counted as shadow-denied). Either half may have no rules when the whole has some (a
    /// file of only shadow rules enforces nothing, on purpose), while an empty whole stays
    /// refused unless it says `allow_empty`. Each rule keeps its place in the file
    /// ([`RuleConfig::place`](tollgate::policy::RuleConfig::place)), which its errors and a
    /// ban's refusals name it by (`rules[2]`, not its place in its half).
    pub fn by_name(mut config: PolicyConfig, names: &[&str]) -> ShadowSplit {
        config.allow_empty = config.allow_empty || !config.rules.is_empty();
        // Each rule keeps its place in the file, for errors and refusals to name it by.
        for (i, rule) in config.rules.iter_mut().enumerate() {
            rule.place.get_or_insert(i);
        }
        let (shadow, enforced) = std::mem::take(&mut config.rules)
            .into_iter()
            .partition(|r| names.contains(&r.name.as_str()));
        // A copy of the whole with its own rules, so that no setting of the file (one
        // added later included) is left out of either half.
        let half = |rules| {
            let mut half = config.clone();
            half.rules = rules;
            half
        };
        ShadowSplit {
            enforced: half(enforced),
            shadow: half(shadow),
        }
    }
}

/// The place in the file of the rule `error` names (`rules[2].limit`: 2); `None` for an
/// error of the file's own settings, which comes before any rule's.
fn rule_place(error: &PolicyConfigError) -> Option<usize> {
    let (place, _) = error.path.strip_prefix("rules[")?.split_once(']')?;
    place.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadow_must_be_a_bool_and_both_halves_validate() {
        let err = ShadowSplit::from_toml(
            "[[rules]]\nname = \"a\"\nlimit = 1\nwindow = \"1s\"\nshadow = \"yes\"\n",
        );
        assert_eq!(
            err.map_err(|e| e.to_string().contains("rules[0].shadow")),
            Err(true)
        );
        let err = ShadowSplit::from_toml(
            "[[rules]]\nname = \"a\"\nlimit = 0\nwindow = \"1s\"\nshadow = true\n",
        );
        assert!(err.is_err());
        let split = ShadowSplit::from_toml(
            "capacity = 10\n[[rules]]\nname = \"a\"\nlimit = 1\nwindow = \"1s\"\nshadow = false\n",
        );
        assert_eq!(
            split.map(|s| (
                s.enforced.rules.len(),
                s.shadow.rules.len(),
                s.shadow.capacity
            )),
            Ok((1, 0, Some(10)))
        );
    }

    /// An error names the rule by its place in the file, as `Policy::from_toml` does, not
    /// by its place in its half.
    #[test]
    fn errors_name_rules_by_their_place_in_the_file() {
        let rule = |name: &str, limit: u32, window: &str, shadow: bool| {
            format!(
                "[[rules]]\nname = \"{name}\"\nendpoint = \"/{name}\"\nlimit = {limit}\n\
                 window = \"{window}\"\nshadow = {shadow}\n"
            )
        };
        let path = |text: String| ShadowSplit::from_toml(&text).map_err(|e| e.path);
        // The third rule, the first enforced one after two shadow rules.
        let text =
            rule("a", 1, "1s", true) + &rule("b", 1, "1s", true) + &rule("c", 1, "1x", false);
        assert_eq!(path(text), Err("rules[2].window".to_owned()));
        // The second rule, the first shadow one.
        let text = rule("a", 1, "1s", false) + &rule("b", 0, "1s", true);
        assert_eq!(path(text), Err("rules[1].limit".to_owned()));
        // A name used twice in one half names both rules by their places in the file.
        let text =
            rule("a", 1, "1s", false) + &rule("b", 1, "1s", true) + &rule("b", 2, "1m", true);
        let error = ShadowSplit::from_toml(&text).map(|_| ());
        assert_eq!(
            error.map_err(|e| e.to_string()),
            Err("rules[2].name: \"b\" is already the name of rules[1]".to_owned())
        );
        // A name is the user's text, never renumbered.
        let text = rule("rules[0]", 1, "1s", false)
            + &rule("x", 1, "1s", true)
            + &rule("rules[0]", 2, "1m", false);
        let error = ShadowSplit::from_toml(&text).map(|_| ());
        assert_eq!(
            error.map_err(|e| e.to_string()),
            Err("rules[2].name: \"rules[0]\" is already the name of rules[0]".to_owned())
        );
        // Errors in both halves: the one first in the file, whichever half it is in.
        let text = rule("a", 0, "1s", true) + &rule("b", 1, "1x", false);
        assert_eq!(path(text), Err("rules[0].limit".to_owned()));
        let text = rule("a", 1, "1x", false) + &rule("b", 0, "1s", true);
        assert_eq!(path(text), Err("rules[0].window".to_owned()));
    }

    /// A ban's refusal names the rule by its place in the file too (what the layer's
    /// refusal event logs), behind shadow rules that come before it.
    #[test]
    fn a_bans_refusals_name_its_place_in_the_file() -> Result<(), Box<dyn std::error::Error>> {
        let split = ShadowSplit::from_toml(
            r#"
            [[rules]]
            name = "trial"
            limit = 5
            window = "1m"
            shadow = true

            [[rules]]
            name = "default"
            limit = 10
            window = "1m"

            [[rules]]
            name = "retired"
            prefix = "/v0"
            limit = 0
            reason = "use /v1"
            "#,
        )?;
        let policy = tollgate::policy::Policy::new(split.enforced, tollgate::ManualClock::new())?;
        let decision = policy.allow("k", "/v0/users", 1)?;
        let path = decision.listing().map(tollgate::policy::Listing::path);
        assert_eq!(path, Some("rules[2]"));
        Ok(())
    }

    /// The file's lists and its laundering guard reach both halves (they were dropped).
    #[test]
    fn both_halves_keep_the_lists_and_the_guard() {
        let split = ShadowSplit::from_toml(
            r#"
            launder_guard = true
            capacity = 50
            [[rules]]
            name = "default"
            limit = 100
            window = "1m"
            [[rules]]
            name = "trial"
            limit = 5
            window = "1m"
            shadow = true
            [[deny]]
            client = "acct_666"
            reason = "fraud"
            [[allow]]
            client = "acct_ok"
            "#,
        );
        let halves = split.map(|s| {
            [s.enforced, s.shadow].map(|h| {
                let names: Vec<String> = h.rules.iter().map(|r| r.name.clone()).collect();
                (
                    names,
                    h.deny.len(),
                    h.allow.len(),
                    h.launder_guard,
                    h.capacity,
                )
            })
        });
        assert_eq!(
            halves,
            Ok([
                (vec!["default".to_owned()], 1, 1, true, Some(50)),
                (vec!["trial".to_owned()], 1, 1, true, Some(50)),
            ])
        );
    }
}
