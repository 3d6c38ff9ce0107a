//! The limits compiled to a tollgate rules file (TOML): one `[[rules]]` per limit with a
//! rule, selected by its endpoint, its tiers as `[[rules.tiers]]`; and tollgate's verdict
//! on that file, its errors reported at the YAML field they came from.

use std::fmt::Write;

use tollgate::policy::{PolicyConfig, PolicyConfigError};

use super::limit::Limit;
use super::tier::Form;
use super::{ConfigError, Domain};

/// A compiled rules file.
#[derive(Debug)]
pub(super) struct Rules {
    /// The TOML text.
    pub(super) toml: String,
    /// The limit (its index) of each rule, in file order.
    pub(super) limits: Vec<usize>,
}

/// Writes `text` as a TOML basic string.
fn quoted(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() && u32::from(c) < 0x80 => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The rules of `limits` (whose domains are `domains`).
pub(super) fn rules(domains: &[Domain], limits: &[Limit]) -> Rules {
    let mut toml = String::from(
        "# Compiled by tollgate-server from Envoy ratelimit descriptors: one rule per\n\
         # descriptor with a limit, selected by the descriptor's path as its endpoint.\n\
         allow_empty = true\n",
    );
    let mut indices = Vec::new();
    for (index, limit) in limits.iter().enumerate() {
        if !limit.has_rule() {
            continue;
        }
        indices.push(index);
        toml.push_str("\n# ");
        if let Some(domain) = domains.get(limit.domain) {
            quoted(&domain.source, &mut toml);
            toml.push_str(", domain ");
            quoted(&domain.name, &mut toml);
            toml.push_str(", ");
        }
        toml.push_str(&limit.path);
        toml.push_str("\n[[rules]]\nname = ");
        quoted(&limit.name, &mut toml);
        toml.push_str("\nendpoint = ");
        quoted(&limit.endpoint, &mut toml);
        if limit.shared {
            // One client's table, not `per = "global"`: a global tier is no client's, so
            // the admin API could neither reset nor list the one descriptor limited there.
            toml.push_str("\ncapacity = 1");
        }
        toml.push('\n');
        for tier in &limit.tiers {
            toml.push_str("[[rules.tiers]]\n");
            if let Some(name) = &tier.name {
                toml.push_str("name = ");
                quoted(name, &mut toml);
                toml.push('\n');
            }
            let _ = writeln!(toml, "limit = {}", tier.limit);
            toml.push_str("window = ");
            quoted(&tier.window, &mut toml);
            let _ = write!(toml, "\nalgorithm = \"{}\"\n", tier.algorithm);
            if let Some(burst) = tier.burst {
                let _ = writeln!(toml, "burst = {burst}");
            }
        }
    }
    Rules {
        toml,
        limits: indices,
    }
}

/// Loads `rules` as tollgate would; an error is reported at the YAML field it blames.
pub(super) fn check(
    rules: &Rules,
    domains: &[Domain],
    limits: &[Limit],
) -> Result<(), ConfigError> {
    let Err(e) = PolicyConfig::from_toml(&rules.toml) else {
        return Ok(());
    };
    let refused = || {
        ConfigError::new(
            "tollgate-server",
            format!("tollgate refused the compiled rules: {e}"),
        )
    };
    let Some((rule, tier, field)) = blamed(&e) else {
        return Err(refused());
    };
    let Some(limit) = rules.limits.get(rule).and_then(|&i| limits.get(i)) else {
        return Err(refused());
    };
    let Some(domain) = domains.get(limit.domain) else {
        return Err(refused());
    };
    let yaml_field = match (tier.and_then(|t| limit.tiers.get(t)), field) {
        (Some(tier), field) => tier.form.field(field),
        (None, "tiers") => match limit.tiers.first().map(|t| t.form) {
            Some(Form::Listed(_)) => "rate_limit.tiers".to_owned(),
            Some(Form::Envoy | Form::Single) | None => "rate_limit".to_owned(),
        },
        // The rule's own fields are ours (name, endpoint, per): a bug, not the file's.
        (None, _) => {
            return Err(ConfigError::new(
                &domain.source,
                format!("tollgate refused the rule compiled from it: {e}"),
            )
            .in_domain(&domain.name)
            .at(&limit.path))
        }
    };
    let yaml_field = yaml_field.trim_end_matches('.');
    // A message naming another tier of the rule names it in the YAML's terms too.
    let message = e.message.replace(
        &format!("rules[{rule}]"),
        &format!("{}.rate_limit", limit.path),
    );
    Err(ConfigError::new(&domain.source, message)
        .in_domain(&domain.name)
        .at(&format!("{}.{yaml_field}", limit.path)))
}

/// The rule, tier and field a tollgate error's path names: `rules[3].tiers[0].limit` is
/// `(3, Some(0), "limit")`, `rules[3].tiers` is `(3, None, "tiers")`.
fn blamed(e: &PolicyConfigError) -> Option<(usize, Option<usize>, &str)> {
    let (rule, rest) = e.path.strip_prefix("rules[")?.split_once(']')?;
    let rule = rule.parse().ok()?;
    let rest = rest.strip_prefix('.').unwrap_or(rest);
    match rest.strip_prefix("tiers[") {
        Some(tier) => {
            let (tier, field) = tier.split_once(']')?;
            let field = field.strip_prefix('.').unwrap_or(field);
            Some((rule, Some(tier.parse().ok()?), field))
        }
        None => Some((rule, None, rest)),
    }
}
