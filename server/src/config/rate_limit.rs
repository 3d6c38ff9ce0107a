//! The checks of one `rate_limit` block: which of its forms it is written in (Envoy's
//! `unit` and `requests_per_unit`, tollgate's one tier or `tiers`, or `unlimited`), each
//! form complete and alone, and `name` and `replaces` as the Go service's loader
//! (`loadDescriptors`) requires them.

use tollgate::policy::parse_duration;

use super::error::Place;
use super::tier::{Form, Tier, ALGORITHMS};
use super::unit::Unit;
use super::yaml;
use super::ConfigError;

/// A checked `rate_limit`.
#[derive(Debug)]
pub(super) struct Checked {
    /// What enforces it.
    pub(super) enforcement: Enforcement,
    /// `name`, when given and not empty.
    pub(super) name: Option<Box<str>>,
    /// The names in `replaces`.
    pub(super) replaces: Box<[Box<str>]>,
}

/// What enforces a limit.
#[derive(Debug)]
pub(super) enum Enforcement {
    /// `unlimited: true`: nothing.
    Unlimited,
    /// `requests_per_unit: 0`: every request with a cost is over the limit.
    Blocked(Unit),
    /// A tollgate rule of these tiers; Envoy's `current_limit` for it.
    Tiers(Vec<Tier>, Option<(u32, Unit)>),
}

/// The first of `fields` (name, whether given) that is given.
fn first(fields: &[(&'static str, bool)]) -> Option<&'static str> {
    fields
        .iter()
        .find(|(_, given)| *given)
        .map(|(name, _)| *name)
}

/// Checks the `rate_limit` of the descriptor at `path`.
pub(super) fn check(
    raw: yaml::RateLimit,
    place: Place<'_>,
    path: &str,
) -> Result<Checked, ConfigError> {
    let at = |field: &str| format!("{path}.rate_limit.{field}");
    let envoy_form = first(&[
        ("unit", raw.unit.is_some()),
        ("requests_per_unit", raw.requests_per_unit.is_some()),
    ]);
    let single_form = first(&[
        ("limit", raw.limit.is_some()),
        ("window", raw.window.is_some()),
        ("algorithm", raw.algorithm.is_some()),
        ("burst", raw.burst.is_some()),
    ]);
    let listed_form = first(&[("tiers", raw.tiers.is_some())]);
    let mut present = [envoy_form, single_form, listed_form].into_iter().flatten();

    let enforcement = if raw.unlimited == Some(true) {
        if let Some(field) = present.next() {
            return Err(place.error(
                &at(field),
                "not with unlimited: true (an unlimited limit has no limit to give)",
            ));
        }
        Enforcement::Unlimited
    } else {
        let (Some(chosen), second) = (present.next(), present.next()) else {
            return Err(place.error(
                &format!("{path}.rate_limit"),
                "no limit: give unit and requests_per_unit (or tollgate's limit and window, \
                 or tiers), or unlimited: true",
            ));
        };
        if let Some(second) = second {
            return Err(place.error(
                &at(second),
                format!(
                    "not with {chosen}: a rate_limit is written in one form, Envoy's unit and \
                     requests_per_unit, tollgate's limit and window, or tiers"
                ),
            ));
        }
        if envoy_form.is_some() {
            envoy(&raw, place, &at)?
        } else if single_form.is_some() {
            let written = Written {
                name: None,
                limit: raw.limit,
                window: raw.window.as_deref(),
                algorithm: raw.algorithm.as_deref(),
                burst: raw.burst,
            };
            let (tier, length) = tier(written, Form::Single, place, &at)?;
            let current = current_limit(&tier, length);
            Enforcement::Tiers(vec![tier], current)
        } else {
            listed(&raw, place, &at)?
        }
    };

    let name = raw.name.filter(|n| !n.is_empty()).map(Box::from);
    let mut replaces = Vec::new();
    for (i, entry) in raw.replaces.into_iter().flatten().enumerate() {
        let field = at(&format!("replaces[{i}].name"));
        let replaced = match entry.name {
            Some(replaced) if !replaced.is_empty() => replaced,
            Some(_) | None => return Err(place.error(&field, "missing")),
        };
        if name.as_deref() == Some(replaced.as_str()) {
            return Err(place.error(&field, format!("{replaced:?} is this limit's own name")));
        }
        replaces.push(Box::from(replaced));
    }
    Ok(Checked {
        enforcement,
        name,
        replaces: replaces.into(),
    })
}

/// Envoy's form: a fixed window of `requests_per_unit` per `unit`, aligned to Unix time.
fn envoy(
    raw: &yaml::RateLimit,
    place: Place<'_>,
    at: &dyn Fn(&str) -> String,
) -> Result<Enforcement, ConfigError> {
    let Some(unit) = &raw.unit else {
        return Err(place.error(&at("unit"), "missing"));
    };
    let Some(unit) = Unit::parse(unit) else {
        return Err(place.error(
            &at("unit"),
            format!("{unit:?} is not a unit (second, minute, hour, day, week, month, year)"),
        ));
    };
    let Some(requests) = raw.requests_per_unit else {
        return Err(place.error(
            &at("requests_per_unit"),
            "missing (the Go service reads a missing one as 0, which denies every request: \
             write 0 if that is meant)",
        ));
    };
    if requests == 0 {
        return Ok(Enforcement::Blocked(unit));
    }
    let tier = Tier {
        name: None,
        limit: u64::from(requests),
        window: unit.window().into(),
        algorithm: "fixed_window",
        burst: None,
        form: Form::Envoy,
    };
    Ok(Enforcement::Tiers(vec![tier], Some((requests, unit))))
}

/// `tiers`: each a complete tier.
fn listed(
    raw: &yaml::RateLimit,
    place: Place<'_>,
    at: &dyn Fn(&str) -> String,
) -> Result<Enforcement, ConfigError> {
    let listed = raw.tiers.as_deref().unwrap_or_default();
    if listed.is_empty() {
        return Err(place.error(&at("tiers"), "must not be empty"));
    }
    let mut tiers = Vec::with_capacity(listed.len());
    let mut current = None;
    for (i, t) in listed.iter().enumerate() {
        let prefix = format!("tiers[{i}]");
        let written = Written {
            name: t.name.as_deref(),
            limit: t.limit,
            window: t.window.as_deref(),
            algorithm: t.algorithm.as_deref(),
            burst: t.burst,
        };
        let (tier, length) = tier(written, Form::Listed(i), place, &|field| {
            at(&format!("{prefix}.{field}"))
        })?;
        if i == 0 {
            current = current_limit(&tier, length);
        }
        tiers.push(tier);
    }
    Ok(Enforcement::Tiers(tiers, current))
}

/// A tier's fields as written.
struct Written<'a> {
    /// Its name in headers (`tiers` only).
    name: Option<&'a str>,
    /// Permits per window.
    limit: Option<u64>,
    /// The window.
    window: Option<&'a str>,
    /// The algorithm.
    algorithm: Option<&'a str>,
    /// The burst.
    burst: Option<u64>,
}

/// One tollgate tier, with its window's length. Its numbers are tollgate's to judge (the
/// compiled rules are loaded, and an error is reported at the field it blames).
fn tier(
    written: Written<'_>,
    form: Form,
    place: Place<'_>,
    at: &dyn Fn(&str) -> String,
) -> Result<(Tier, tollgate::Nanos), ConfigError> {
    let Some(limit) = written.limit else {
        return Err(place.error(&at("limit"), "missing"));
    };
    let Some(window) = written.window else {
        return Err(place.error(&at("window"), "missing (write e.g. \"1s\", \"1m\", \"1d\")"));
    };
    let length = parse_duration(window).map_err(|e| place.error(&at("window"), e.to_string()))?;
    let algorithm = match written.algorithm {
        None => "gcra",
        Some(written) => match ALGORITHMS.iter().find(|a| **a == written) {
            Some(known) => known,
            None if written == "leaky_bucket" => {
                return Err(place.error(
                    &at("algorithm"),
                    "leaky_bucket admits with a delay to wait, which a rate limit \
                     service's answer cannot carry: use gcra (the same rate and burst, \
                     answered at once)",
                ))
            }
            None => {
                return Err(place.error(
                    &at("algorithm"),
                    format!("unknown algorithm {written:?} ({})", ALGORITHMS.join(", ")),
                ))
            }
        },
    };
    let tier = Tier {
        name: written.name.map(Box::from),
        limit,
        window: window.into(),
        algorithm,
        burst: written.burst,
        form,
    };
    Ok((tier, length))
}

/// Envoy's `current_limit` for a tollgate tier: its limit per the unit exactly as long as
/// its window (`length`), if the limit fits and there is such a unit.
fn current_limit(tier: &Tier, length: tollgate::Nanos) -> Option<(u32, Unit)> {
    u32::try_from(tier.limit).ok().zip(Unit::of_window(length))
}
