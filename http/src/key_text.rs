//! [`KeyText`]: a client key as text — borrowed from the request where it can be, an
//! address written inline where it is one (no allocation per request), computed otherwise.

use core::fmt::{self, Write as _};
use core::ops::Deref;
use std::net::{IpAddr, Ipv6Addr};

use arrayvec::ArrayString;

/// The longest text of an address: an IPv6 address with an embedded IPv4 in full,
/// `ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255`.
const ADDRESS_LEN: usize = 45;

/// Each octet's decimal digits followed by a dot, packed little-endian into a word (the
/// first digit in the low byte), and how many digits there are: an address is written one
/// word per octet, each placed by the lengths of those before it. The word, by octet size
/// (`D1` the first digit written; bytes above the dot are zero and are overwritten by the
/// next octet or dropped):
///
/// ```text
///  bits:      31..24  23..16  15..8   7..0
///  3 digits:  '.'     D3      D2      D1      e.g. 192 → '.' '2' '9' '1'
///  2 digits:  0       '.'     D2      D1      e.g.  42 →  0  '.' '2' '4'
///  1 digit:   0       0       '.'     D1      e.g.   7 →  0   0  '.' '7'
/// ```
const OCTETS: [(u32, u8); 256] = {
    let mut table = [(0u32, 0u8); 256];
    let mut i = 0;
    while i < 256 {
        // Truncation: `i < 256`.
        #[allow(clippy::cast_possible_truncation)]
        let octet = i as u8;
        let (d0, d1, d2) = (
            b'0' + octet / 100,
            b'0' + octet / 10 % 10,
            b'0' + octet % 10,
        );
        let dot = b'.' as u32;
        table[i] = if octet >= 100 {
            (
                d0 as u32 | (d1 as u32) << 8 | (d2 as u32) << 16 | dot << 24,
                3,
            )
        } else if octet >= 10 {
            (d1 as u32 | (d2 as u32) << 8 | dot << 16, 2)
        } else {
            (d2 as u32 | dot << 8, 1)
        };
        i += 1;
    }
    table
};

/// A client key as [`ClientKey::extract`](super::ClientKey::extract) reads it: a `str`
/// (it derefs to one) that a peer or forwarded address writes inline and a header lends
/// from the request, so the common keys cost no allocation.
///
/// ```
/// use tollgate_http::{ClientKey, Head};
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(std::net::SocketAddr::from(([192, 0, 2, 7], 443)));
/// let key = ClientKey::peer_ip().extract(&Head::of(&request))?;
/// assert_eq!(key, "192.0.2.7");
/// assert_eq!(key.len(), 9);
/// let owned: String = key.into_owned();
/// # let _ = owned;
/// # Ok::<(), tollgate_http::KeyError>(())
/// ```
#[derive(Clone)]
pub struct KeyText<'a>(Repr<'a>);

#[derive(Clone)]
enum Repr<'a> {
    Borrowed(&'a str),
    /// An IPv4 address's text, `text[..len]`: only ASCII digits and dots, written by
    /// [`KeyText::address`] alone, in place (no copy, no validation per request).
    V4 {
        text: V4Text,
        len: u8,
    },
    Address(ArrayString<ADDRESS_LEN>),
    Owned(String),
}

/// An IPv4 address's text, word-aligned: it is stored with one 16-byte write and read and
/// moved in aligned words, never in pieces that straddle the writes (which would stall
/// each read on the store buffer; the text at an odd offset after the enum's tag did).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct V4Text([u8; 16]);

impl V4Text {
    /// The first `len` bytes.
    #[inline(always)]
    fn as_str(&self, len: u8) -> &str {
        let bytes = self.0.get(..usize::from(len)).unwrap_or_default();
        // SAFETY: `KeyText::address` alone writes `V4`, with ASCII digits and dots in
        // `text[..len]`: valid UTF-8.
        unsafe { core::str::from_utf8_unchecked(bytes) }
    }
}

impl<'a> KeyText<'a> {
    /// `text`, lent by the request (or the layer: a fallback key).
    pub(crate) fn borrowed(text: &'a str) -> KeyText<'a> {
        KeyText(Repr::Borrowed(text))
    }

    /// `text`, computed.
    pub(crate) fn owned(text: String) -> KeyText<'a> {
        KeyText(Repr::Owned(text))
    }

    /// `ip` as `Display` writes it, inline; IPv4 without the `fmt` machinery, in the
    /// caller (per request), IPv6 out of line.
    #[inline(always)]
    pub(crate) fn address(ip: IpAddr) -> KeyText<'a> {
        match ip {
            IpAddr::V4(v4) => {
                // One word per octet (its digits and a dot), each placed right after the
                // last octet's digits and dot, in registers: the first two octets in one
                // 64-bit half, the last two in another, that half then placed after the
                // first (shifts of 64-bit words: one of 128 bits costs several instructions
                // each). At most 15 bytes are kept ("255.255.255.255"), the last octet's dot
                // beyond them. The text is then stored at once (see `V4Text`).
                let [a, b, c, d] = v4.octets().map(|octet| OCTETS[usize::from(octet)]);
                // Each half: two octets of at most three digits and a dot, so 8 bytes at
                // most, and its length in bytes.
                let half = |(w0, d0): (u32, u8), (w1, d1): (u32, u8)| {
                    let first = u32::from(d0) + 1;
                    (
                        u64::from(w0) | u64::from(w1) << (first * 8),
                        first + u32::from(d1) + 1,
                    )
                };
                let ((low, first), (high, second)) = (half(a, b), half(c, d));
                // The second half starts `first` bytes in: 4 ("0.0.") to 8, so it is placed
                // by a shift of 32 to 64 bits, written as two that are each under 64.
                let shift = first * 8;
                let words = [low | (high << (shift - 32)) << 32, high >> (64 - shift)];
                // The last octet's dot is not part of the address.
                let len = first + second - 1;
                // Truncation: at most 15.
                #[allow(clippy::cast_possible_truncation)]
                let len = len as u8;
                let mut text = [0u8; 16];
                let (lo, hi) = text.split_at_mut(8);
                lo.copy_from_slice(&words[0].to_le_bytes());
                hi.copy_from_slice(&words[1].to_le_bytes());
                KeyText(Repr::V4 {
                    text: V4Text(text),
                    len,
                })
            }
            IpAddr::V6(v6) => KeyText::v6(v6),
        }
    }

    /// [`address`](Self::address) of an IPv6 address.
    #[inline(never)]
    fn v6(v6: Ipv6Addr) -> KeyText<'a> {
        let mut out = ArrayString::<ADDRESS_LEN>::new();
        // At most ADDRESS_LEN bytes, so the write cannot fail; were it to, the address is
        // kept whole, allocated.
        if write!(out, "{v6}").is_err() {
            return KeyText::owned(v6.to_string());
        }
        KeyText(Repr::Address(out))
    }

    /// The key as a `str`.
    #[inline]
    pub fn as_str(&self) -> &str {
        // An IPv4 address inline, the others out of line: a match of all four compiles to a
        // jump table, one more cache line for a request that finds the caches cold.
        if let Repr::V4 { text, len } = &self.0 {
            return text.as_str(*len);
        }
        self.text()
    }

    /// [`as_str`](Self::as_str), of any key.
    #[inline(never)]
    fn text(&self) -> &str {
        match &self.0 {
            Repr::Borrowed(text) => text,
            Repr::V4 { text, len } => text.as_str(*len),
            Repr::Address(text) => text,
            Repr::Owned(text) => text,
        }
    }

    /// The key as an owned `String`.
    pub fn into_owned(self) -> String {
        match self.0 {
            Repr::Owned(text) => text,
            Repr::Borrowed(_) | Repr::V4 { .. } | Repr::Address(_) => self.as_str().to_owned(),
        }
    }
}

impl Deref for KeyText<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for KeyText<'_> {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for KeyText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for KeyText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for KeyText<'_> {
    fn eq(&self, other: &KeyText<'_>) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for KeyText<'_> {}

impl PartialEq<str> for KeyText<'_> {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for KeyText<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_as_display_writes_them() {
        for ip in [
            "0.0.0.0",
            "1.2.3.4",
            "10.100.255.9",
            "255.255.255.255",
            "192.0.2.10",
            "::",
            "2001:db8::1",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "::ffff:255.255.255.255",
            "64:ff9b::c000:20a",
        ] {
            let parsed: IpAddr = ip.parse().unwrap_or(IpAddr::V4([9, 9, 9, 9].into()));
            let key = KeyText::address(parsed);
            assert_eq!(key.as_str(), parsed.to_string());
            assert!(
                matches!(key.0, Repr::V4 { .. } | Repr::Address(_)),
                "{ip} inline"
            );
        }
    }

    #[test]
    fn the_longest_address_fits_inline() {
        let longest: IpAddr = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"
            .parse()
            .unwrap_or(IpAddr::V4([9, 9, 9, 9].into()));
        let key = KeyText::address(longest);
        assert_eq!(key.as_str(), longest.to_string());
        assert!(matches!(key.0, Repr::Address(_)));
    }

    /// Every value of each octet, in each position, with the other three drawn from the
    /// digit counts' boundaries: every pattern of one-, two- and three-digit octets, each
    /// octet's text at every offset it can start at.
    #[test]
    fn every_octet_in_every_position_reads_as_display_writes_it() {
        const EDGES: [u8; 6] = [0, 9, 10, 99, 100, 255];
        for x in 0..=255u8 {
            for a in EDGES {
                for b in EDGES {
                    for c in EDGES {
                        for octets in [[x, a, b, c], [a, x, b, c], [a, b, x, c], [a, b, c, x]] {
                            let ip = IpAddr::V4(octets.into());
                            assert_eq!(KeyText::address(ip).as_str(), ip.to_string());
                        }
                    }
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn every_address_reads_as_display_writes_it(v4 in proptest::num::u32::ANY, v6 in proptest::num::u128::ANY) {
            for ip in [IpAddr::V4(v4.into()), IpAddr::V6(v6.into())] {
                let key = KeyText::address(ip);
                proptest::prop_assert_eq!(key.as_str(), ip.to_string());
                let inline = matches!(key.0, Repr::V4 { .. } | Repr::Address(_));
                proptest::prop_assert!(inline);
            }
        }
    }
}
