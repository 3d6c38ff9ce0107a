//! The wall-clock reading every default clock starts from (see the module docs of
//! [`clock`](super): one time base, Unix time).

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch, read once from the wall clock: `0` for a clock set
/// before 1970, saturated past 2554.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    #[test]
    fn unix_now_is_after_2020() {
        // 2020-01-01T00:00:00Z in ns.
        assert!(super::unix_now() > 1_577_836_800_000_000_000);
    }
}
