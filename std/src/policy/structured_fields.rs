//! The one writer of the structured fields (RFC 9651) in rate-limit headers: the
//! `RateLimit-Policy` and `RateLimit` list items, their sf-string names and their integer
//! parameters. [`RateLimitHeaders`](super::RateLimitHeaders) and every `HeaderStyle` of
//! `tollgate-http` write through it, and the `headers` fuzz target drives both.
//!
//! # A name an sf-string cannot hold
//!
//! An sf-string holds printable ASCII only, `0x20..=0x7E`, with `"` and `\` escaped
//! (RFC 9651 §3.3.3). Config validation refuses any other rule or tier name, but a
//! [`TierLabel`](super::TierLabel) built by hand can still carry one (CR, LF, NUL, a
//! non-ASCII letter). Such a character is written as `?`, one per character:
//!
//! - written raw, CR or LF would end the header line (a forged field), and any other byte
//!   outside the range makes a conforming parser fail the whole field (§4.2.5), so no
//!   tier in it would be read;
//! - leaving the fields out (what the HTTP layer used to do while `RateLimitHeaders`
//!   wrote `?`) throws away every tier's quota, window and remaining count for one
//!   tier's name, and to a client that paces itself on `RateLimit` a missing field reads
//!   as "no limit";
//! - a Display String (`%"caf%c3%a9"`, §3.3.8) would carry the name exactly, but the
//!   ratelimit-headers drafts make the item's value an sf-string, so a client parsing the
//!   field as they define it would reject it.
//!
//! With `?`, the field stays parseable, every number in it stays true, and the name reads
//! as near to the configured one as an sf-string can: its printable characters in place,
//! a `?` (the usual replacement character of ASCII encoders) where one could not be
//! written.

use tollgate_core::{Decision, Nanos};

use super::error::is_printable;

/// Appends `name` as an sf-string (`"` and `\` escaped, and each character an sf-string
/// cannot hold written as `?`: see the module docs for why) but for its closing quote,
/// which the caller appends with what follows it (one append instead of two: this is per
/// request).
#[inline]
fn sf_string_open(out: &mut String, name: &str) {
    out.push('"');
    if is_plain(name.as_bytes()) {
        // The common case: nothing to escape or replace, one append.
        out.push_str(name);
    } else {
        for c in name.chars() {
            if !is_printable(c) {
                out.push('?');
                continue;
            }
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
}

/// Whether every byte of `name` goes into an sf-string as it is: printable ASCII
/// (`0x20..=0x7E`) other than `"` and `\`. Eight bytes at a time (this is per request and
/// per tier): a name of 8 bytes or more in words (the last one overlapping the one before
/// it), of 4 to 7 in two overlapping halves of one word, of 1 to 3 in its first, middle
/// and last bytes with the rest of the word padding that passes.
#[inline]
fn is_plain(name: &[u8]) -> bool {
    /// A byte that passes, in the lanes a short name leaves empty.
    const PAD: u64 = u64::from_le_bytes([b'a'; 8]);
    let n = name.len();
    if n >= 8 {
        let mut chunks = name.chunks_exact(8);
        return chunks.all(|c| {
            c.try_into()
                .is_ok_and(|c| plain_word(u64::from_le_bytes(c)))
        }) && name[n - 8..]
            .try_into()
            .is_ok_and(|c| plain_word(u64::from_le_bytes(c)));
    }
    if n >= 4 {
        let half = |at: usize| {
            name[at..at + 4]
                .try_into()
                .map_or(0, |b| u64::from(u32::from_le_bytes(b)))
        };
        return plain_word(half(0) | half(n - 4) << 32);
    }
    match *name {
        [] => true,
        [first, ..] => {
            let three =
                u64::from(first) | u64::from(name[n / 2]) << 8 | u64::from(name[n - 1]) << 16;
            plain_word(three | PAD << 24)
        }
    }
}

/// [`is_plain`] for the eight bytes of `w`, one per lane:
///
/// ```text
///  63      56 55      48        15       8 7        0
/// ┌──────────┬──────────┬ ··· ┬──────────┬──────────┐
/// │  byte 7  │  byte 6  │     │  byte 1  │  byte 0  │   each lane: 0x20..=0x7E, not `"` or `\`
/// └──────────┴──────────┴ ··· ┴──────────┴──────────┘
/// ```
///
/// Once no lane has its high bit set, every lane is below 0x80, and adding at most 0x80 to
/// each never carries into the next: the high bit of lane + k then says lane ≥ 0x80 − k.
#[inline]
fn plain_word(w: u64) -> bool {
    const fn lanes(b: u8) -> u64 {
        u64::from_le_bytes([b; 8])
    }
    let high = lanes(0x80);
    let all_high = |x: u64| x & high == high;
    w & high == 0
        // Every lane ≥ 0x20.
        && all_high(w.wrapping_add(lanes(0x80 - 0x20)))
        // Every lane ≤ 0x7E (0x7F + 1 is the only lane reaching 0x80).
        && w.wrapping_add(lanes(0x01)) & high == 0
        // No lane is `"` or `\` (the lane XOR it is ≥ 1).
        && all_high((w ^ lanes(b'"')).wrapping_add(lanes(0x7f)))
        && all_high((w ^ lanes(b'\\')).wrapping_add(lanes(0x7f)))
}

/// Appends the decimal digits of `n` (no `fmt` machinery: this is per request).
pub fn push_u64(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// The `t` of one tier: for a deny, when it can admit again (at least 1 s); otherwise
/// when its quota is fully restored. Whole seconds, rounded up.
pub fn reset_secs(d: &Decision) -> u64 {
    if d.allowed {
        d.reset_after.as_secs_ceil()
    } else {
        d.retry_after.as_secs_ceil().max(1)
    }
}

/// Appends `", "` unless `out` is empty: the canonical separator of list members.
fn separate(out: &mut String) {
    if !out.is_empty() {
        out.push_str(", ");
    }
}

/// Appends the `pk` parameter, if any (an sf-binary the caller rendered).
fn partition_key(out: &mut String, pk: Option<&str>) {
    if let Some(pk) = pk {
        out.push_str(";pk=");
        out.push_str(pk);
    }
}

/// Appends one `RateLimit-Policy` item to the list in `out`:
/// `"name";q=QUOTA;w=WINDOW[;pk=PK]`, the window in whole seconds rounded up, never 0.
pub fn policy_item(out: &mut String, name: &str, quota: u64, window: Nanos, pk: Option<&str>) {
    separate(out);
    sf_string_open(out, name);
    out.push_str("\";q=");
    push_u64(out, quota);
    out.push_str(";w=");
    push_u64(out, window.as_secs_ceil().max(1));
    partition_key(out, pk);
}

/// Appends one `RateLimit` item to the list in `out`: `"name";r=REMAINING;t=RESET[;pk=PK]`
/// (see [`reset_secs`]).
pub fn limit_item(out: &mut String, name: &str, decision: &Decision, pk: Option<&str>) {
    separate(out);
    sf_string_open(out, name);
    out.push_str("\";r=");
    push_u64(out, decision.remaining);
    out.push_str(";t=");
    push_u64(out, reset_secs(decision));
    partition_key(out, pk);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sf_strings_escape_and_replace() {
        for (name, want) in [
            ("api", "\"api\""),
            ("", "\"\""),
            ("a\"b\\c", r#""a\"b\\c""#),
            ("caf\u{e9}", "\"caf?\""),
            ("x\r\nInjected: 1", "\"x??Injected: 1\""),
            ("nul\0 tab\t del\u{7f}", "\"nul? tab? del?\""),
            ("\"\u{1F600}\\", r#""\"?\\""#),
        ] {
            let mut out = String::new();
            sf_string_open(&mut out, name);
            out.push('"');
            assert_eq!(out, want, "{name:?}");
        }
    }

    /// The word-at-a-time check against its definition, byte by byte, for every length
    /// the three ways cover (each byte value tried in every position of names of 1 to 17
    /// bytes; the empty name is plain).
    #[test]
    fn plain_names_in_words() {
        let plain = |name: &[u8]| {
            name.iter()
                .all(|&b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\')
        };
        assert!(is_plain(b""));
        for len in 1..=17 {
            for at in 0..len {
                for b in 0..=u8::MAX {
                    let mut name = vec![b'k'; len];
                    name[at] = b;
                    assert_eq!(is_plain(&name), plain(&name), "{name:?}");
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn plain_names_in_words_random(
            // Letters, and the bytes on either side of every bound the check draws.
            name in proptest::collection::vec(
                proptest::prop_oneof![0x1f..=0x23u8, 0x5b..=0x5du8, 0x7d..=0x81u8, b'a'..=b'z'],
                0..40,
            )
        ) {
            let plain = name.iter().all(|&b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\');
            proptest::prop_assert_eq!(is_plain(&name), plain);
        }
    }

    #[test]
    fn digits() {
        for n in [0, 7, 10, 99, 12345, u64::MAX] {
            let mut out = String::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string());
        }
    }

    #[test]
    fn items_and_lists() {
        let mut policy = String::new();
        policy_item(&mut policy, "a", 10, Nanos::from_millis(1), None);
        policy_item(
            &mut policy,
            "b",
            5,
            Nanos::from_millis(60_001),
            Some(":AA==:"),
        );
        assert_eq!(policy, "\"a\";q=10;w=1, \"b\";q=5;w=61;pk=:AA==:");
        let mut limit = String::new();
        let denied = Decision::deny(10, 0, Nanos::from_secs(5), Nanos::new(1));
        limit_item(&mut limit, "a", &denied, None);
        let allowed = Decision::allow(10, 9, Nanos::from_millis(2_500));
        limit_item(&mut limit, "b", &allowed, Some(":AA==:"));
        assert_eq!(limit, "\"a\";r=0;t=1, \"b\";r=9;t=3;pk=:AA==:");
    }
}
