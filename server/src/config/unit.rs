//! [`Unit`]: Envoy's rate limit units, with their lengths as the Go service counts them
//! (`UnitToDivider` in its `src/utils/utilities.go`: a month is 30 days, a year 365) and
//! their values in the protocol (`RateLimitResponse.RateLimit.Unit`).

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as Proto;
use tollgate::{Algorithm, FixedWindow, Nanos};

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

    /// How long from `now` (Unix time) until its window ends: the reset of a fresh fixed
    /// window of this length (core's window arithmetic), whose windows start at multiples
    /// of it, as the Go service's do.
    pub(crate) fn until_window_end(self, now: Nanos) -> Nanos {
        let window = Nanos::from_secs(self.seconds());
        // A window of at most a year and a limit of one are always valid, and a cost of 0
        // always fits: the fallback (a whole window) is never taken.
        let fresh = FixedWindow::new(1, window)
            .ok()
            .and_then(|w| w.peek(0, now, 0).ok());
        fresh.map_or(window, |outcome| outcome.decision.reset_after)
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

#[cfg(test)]
mod tests {
    use super::Unit;
    use tollgate::Nanos;

    /// Windows of Unix time: the rest of the current one, a whole one at its start.
    #[test]
    fn window_ends() {
        let at = |secs: u64, unit: Unit| unit.until_window_end(Nanos::from_secs(secs));
        assert_eq!(at(90, Unit::Minute), Nanos::from_secs(30));
        assert_eq!(at(120, Unit::Minute), Nanos::from_secs(60));
        assert_eq!(at(0, Unit::Second), Nanos::from_secs(1));
        assert_eq!(
            Unit::Day.until_window_end(Nanos::from_secs(86_400 * 3 + 1) + Nanos::new(1)),
            Nanos::from_secs(86_399) - Nanos::new(1)
        );
        assert_eq!(at(0, Unit::Year), Nanos::from_secs(365 * 86_400));
    }
}
