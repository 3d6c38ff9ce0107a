//! [`Unit`]: Envoy's rate limit units, with their lengths as the Go service counts them
//! (`UnitToDivider` in its `src/utils/utilities.go`: a month is 30 days, a year 365) and
//! their values in the protocol (`RateLimitResponse.RateLimit.Unit`).

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as Proto;
use tollgate::Nanos;

/// A unit of `requests_per_unit`. Serialized as the protocol spells it (`SECOND`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum Unit {
    /// 1 s.
    Second,
    /// 60 s.
    Minute,
    /// 3 600 s.
    Hour,
    /// 86 400 s.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub(crate) const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit a config names, in any case (the Go service upper-cases it and looks it
    /// up among the protocol's names, `UNKNOWN` excluded).
    pub(crate) fn parse(text: &str) -> Option<Unit> {
        let upper = text.to_uppercase();
        Unit::ALL.into_iter().find(|unit| unit.as_str() == upper)
    }

    /// The protocol's name: `SECOND`, `MINUTE`, …
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// Its length in seconds: the Go service's divider of Unix time, whose windows start
    /// at `now / seconds * seconds`.
    pub(crate) const fn seconds(self) -> u64 {
        const DAY: u64 = 86_400;
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
        }
    }

    /// How long from `now` (since the Unix epoch) until its window ends, its windows of
    /// Unix time starting at `now / seconds * seconds` as the Go service's.
    pub(crate) fn until_window_end(self, now: std::time::Duration) -> Nanos {
        let window = u128::from(self.seconds()) * 1_000_000_000;
        // At most a year of nanoseconds: fits a u64.
        Nanos::new(u64::try_from(window - now.as_nanos() % window).unwrap_or(u64::MAX))
    }

    /// Its length as a tollgate window (`tollgate::policy::parse_duration` reads it as
    /// [`seconds`](Self::seconds)).
    pub(crate) const fn window(self) -> &'static str {
        match self {
            Unit::Second => "1s",
            Unit::Minute => "1m",
            Unit::Hour => "1h",
            Unit::Day => "1d",
            Unit::Week => "7d",
            Unit::Month => "30d",
            Unit::Year => "365d",
        }
    }

    /// The unit exactly `window` long, if there is one.
    pub(crate) fn of_window(window: Nanos) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|unit| Nanos::from_secs(unit.seconds()) == window)
    }

    /// The protocol's value (`rate_limit_response::rate_limit::Unit`; `as i32` for the
    /// message field).
    pub(crate) const fn proto(self) -> Proto {
        match self {
            Unit::Second => Proto::Second,
            Unit::Minute => Proto::Minute,
            Unit::Hour => Proto::Hour,
            Unit::Day => Proto::Day,
            Unit::Week => Proto::Week,
            Unit::Month => Proto::Month,
            Unit::Year => Proto::Year,
        }
    }
}
