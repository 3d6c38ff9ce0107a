//! IP addresses as rate-limit keys and as ranges: [`IpPrefix`] (one key per IPv4 address
//! or per IPv6 /64 network, by default; IPv4 clients arriving as IPv4-embedded IPv6 keyed
//! by their IPv4), [`Cidr`] (a range such as `10.0.0.0/8`, holding every form of its
//! addresses) and [`CidrError`] (a range that does not parse).

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// How much of a client's address identifies it: the first `v4` bits of an IPv4 address,
/// the first `v6` bits of an IPv6 one.
///
/// The IPv6 default is /64 because one subscriber usually gets a whole /64 (often a /56 or
/// /48): keying on the full 128 bits would hand every client 2⁶⁴ fresh allowances.
///
/// An IPv4 client that arrives as an IPv6 address embedding its IPv4 address is an IPv4
/// client, keyed (and prefixed) by that IPv4 address: otherwise every IPv4 user behind
/// one translator would share one /64 key, and one abuser would lock out all of them. The
/// forms recognised:
///
/// | form | prefix | who writes it |
/// |---|---|---|
/// | IPv4-mapped | `::ffff:0:0/96` | a dual-stack socket accepting IPv4 |
/// | IPv4-translated | `::ffff:0:0:0/96` | SIIT (RFC 6145) |
/// | IPv4-compatible | `::/96`, except `::` and `::1` | deprecated tunnels (RFC 4291) |
/// | NAT64 well-known prefix | `64:ff9b::/96` | NAT64 / SIIT front ends (RFC 6052) |
/// | a network-specific NAT64 prefix | set with [`nat64`](Self::nat64) | the same, with the operator's prefix |
///
/// ```
/// use std::net::IpAddr;
/// use tollgate_http::IpPrefix;
/// let prefix = IpPrefix::default();
/// let a: IpAddr = "2001:db8:1:2:aaaa::1".parse()?;
/// let b: IpAddr = "2001:db8:1:2:bbbb::9".parse()?;
/// assert_eq!(prefix.mask(a), prefix.mask(b));
/// assert_eq!(prefix.mask(a).to_string(), "2001:db8:1:2::");
/// assert_eq!(prefix.mask("::ffff:192.0.2.7".parse()?).to_string(), "192.0.2.7");
/// // Two IPv4 clients behind NAT64: two keys, each the client's IPv4 address.
/// assert_eq!(prefix.mask("64:ff9b::192.0.2.7".parse()?).to_string(), "192.0.2.7");
/// assert_eq!(prefix.mask("64:ff9b::c000:208".parse()?).to_string(), "192.0.2.8");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
// `repr(C)`, the lengths first and nothing aligned beyond a byte: an IPv4 key reads
// `v4` alone, which sits right after its source's tag in its layer's first cache line (see
// `ClientKey` and the layer's `Shared`).
#[repr(C)]
pub struct IpPrefix {
    v4: u8,
    v6: u8,
    nat64: Option<Nat64Prefix>,
}

/// A network-specific NAT64 prefix (RFC 6052): the prefix bits (big-endian bytes: see
/// `IpPrefix`) and their length (32, 40, 48, 56, 64 or 96).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Nat64Prefix {
    bits: [u8; 16],
    len: u8,
}

impl Nat64Prefix {
    /// The IPv4 address `v6` embeds under this prefix (RFC 6052 §2.2: 32 bits right after
    /// the prefix, skipping bits 64..72, which must be zero).
    fn embedded(&self, v6: Ipv6Addr) -> Option<Ipv4Addr> {
        if mask128(u128::from(v6), self.len) != u128::from_be_bytes(self.bits) {
            return None;
        }
        let octets = v6.octets();
        if self.len < 96 && octets[8] != 0 {
            return None;
        }
        let mut v4 = [0u8; 4];
        let mut at = usize::from(self.len / 8);
        for slot in &mut v4 {
            if at == 8 {
                at += 1;
            }
            *slot = octets[at];
            at += 1;
        }
        Some(Ipv4Addr::from(v4))
    }
}

/// The IPv4 address `v6` embeds in one of the forms [`IpPrefix`] lists, if it does.
fn embedded_ipv4(v6: Ipv6Addr, nat64: Option<&Nat64Prefix>) -> Option<Ipv4Addr> {
    const MAPPED: u128 = 0xffff;
    const TRANSLATED: u128 = 0xffff_0000;
    const NAT64_WELL_KNOWN: u128 = 0x0064_ff9b_0000_0000_0000_0000;
    let bits = u128::from(v6);
    // Truncation: the low 32 bits, taken on purpose.
    #[allow(clippy::cast_possible_truncation)]
    let low = bits as u32;
    match bits >> 32 {
        MAPPED | TRANSLATED | NAT64_WELL_KNOWN => Some(Ipv4Addr::from(low)),
        // IPv4-compatible, but `::` (unspecified) and `::1` (loopback) are IPv6.
        0 if low > 1 => Some(Ipv4Addr::from(low)),
        _ => nat64.and_then(|p| p.embedded(v6)),
    }
}

impl Default for IpPrefix {
    /// IPv4 /32 (one key per address), IPv6 /64 (one key per subscriber network).
    fn default() -> IpPrefix {
        IpPrefix::new(32, 64)
    }
}

impl IpPrefix {
    /// Prefix lengths for IPv4 and IPv6 addresses, clamped to 32 and 128.
    pub const fn new(v4: u8, v6: u8) -> IpPrefix {
        IpPrefix {
            v4: if v4 > 32 { 32 } else { v4 },
            v6: if v6 > 128 { 128 } else { v6 },
            nat64: None,
        }
    }

    /// Also keys the IPv4 clients of a NAT64 / SIIT front end that uses the
    /// network-specific prefix `prefix` (RFC 6052: `/32`, `/40`, `/48`, `/56`, `/64` or
    /// `/96`) by their IPv4 address, as it does those under the well-known `64:ff9b::/96`.
    /// One such prefix per key (a later call replaces it).
    ///
    /// ```
    /// use tollgate_http::IpPrefix;
    /// let prefix = IpPrefix::default().nat64("2001:db8:64::/96")?;
    /// assert_eq!(prefix.mask("2001:db8:64::198.51.100.7".parse()?).to_string(), "198.51.100.7");
    /// // RFC 6052's /64 layout: the IPv4 address after the u octet.
    /// let by_64 = IpPrefix::default().nat64("2001:db8:122:344::/64")?;
    /// assert_eq!(by_64.mask("2001:db8:122:344:c0:2:2100:0".parse()?).to_string(), "192.0.2.33");
    /// assert!(IpPrefix::default().nat64("2001:db8::/80").is_err());
    /// assert!(IpPrefix::default().nat64("10.0.0.0/8").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `prefix` is not an IPv6 range of one of RFC 6052's lengths (32, 40, 48, 56, 64, 96).
    pub fn nat64(mut self, prefix: &str) -> Result<IpPrefix, CidrError> {
        let err = |reason| CidrError {
            text: prefix.to_owned(),
            reason,
        };
        let cidr = Cidr::parse(prefix)?;
        let IpAddr::V6(addr) = cidr.addr else {
            return Err(err("a NAT64 prefix is an IPv6 prefix"));
        };
        if ![32, 40, 48, 56, 64, 96].contains(&cidr.len) {
            return Err(err("a NAT64 prefix is a /32, /40, /48, /56, /64 or /96"));
        }
        self.nat64 = Some(Nat64Prefix {
            bits: u128::from(addr).to_be_bytes(),
            len: cidr.len,
        });
        Ok(self)
    }

    /// The IPv4 prefix length.
    pub const fn v4(&self) -> u8 {
        self.v4
    }

    /// The IPv6 prefix length.
    pub const fn v6(&self) -> u8 {
        self.v6
    }

    /// The host `ip` names: the IPv4 address an IPv4-embedded IPv6 address carries (the
    /// forms listed on [`IpPrefix`]), else `ip` itself.
    ///
    /// ```
    /// use tollgate_http::IpPrefix;
    /// let host = |s: &str| IpPrefix::default().host(s.parse().unwrap()).to_string();
    /// assert_eq!(host("64:ff9b::203.0.113.5"), "203.0.113.5");
    /// assert_eq!(host("::ffff:203.0.113.5"), "203.0.113.5");
    /// assert_eq!(host("::1"), "::1");
    /// assert_eq!(host("2001:db8::cb00:7105"), "2001:db8::cb00:7105");
    /// ```
    #[inline]
    pub fn host(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(_) => ip,
            IpAddr::V6(v6) => embedded_ipv4(v6, self.nat64.as_ref()).map_or(ip, IpAddr::V4),
        }
    }

    /// `ip` as a key: its [`host`](Self::host) with every bit past the prefix cleared.
    #[inline]
    pub fn mask(&self, ip: IpAddr) -> IpAddr {
        match self.host(ip) {
            IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(mask32(u32::from(v4), self.v4))),
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(mask128(u128::from(v6), self.v6))),
        }
    }
}

fn mask32(bits: u32, len: u8) -> u32 {
    match len {
        0 => 0,
        n if n >= 32 => bits,
        n => bits & (u32::MAX << (32 - u32::from(n))),
    }
}

fn mask128(bits: u128, len: u8) -> u128 {
    match len {
        0 => 0,
        n if n >= 128 => bits,
        n => bits & (u128::MAX << (128 - u32::from(n))),
    }
}

/// One CIDR range such as `10.0.0.0/8` or `2001:db8::/32` (a bare address is a /32 or
/// /128).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    len: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/n`, `x:y::/n` or a bare address.
    ///
    /// ```
    /// use tollgate_http::Cidr;
    /// let net = Cidr::parse("10.0.0.0/8")?;
    /// assert!(net.contains("10.1.2.3".parse()?));
    /// assert!(!net.contains("11.0.0.1".parse()?));
    /// assert!(Cidr::parse("10.0.0.0/33").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `text` is not an address, or an address and a prefix length that fits it.
    pub fn parse(text: &str) -> Result<Cidr, CidrError> {
        let err = |reason| CidrError {
            text: text.to_owned(),
            reason,
        };
        let (addr, len) = match text.trim().split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text.trim(), None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| err("not an IP address"))?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            // Digits only: `u8`'s parser would take a sign (`/+8`).
            Some(l) if !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) => l
                .parse::<u8>()
                .map_err(|_| err("prefix length not a number"))?,
            Some(_) => return Err(err("prefix length not a number")),
        };
        if len > max {
            return Err(err("prefix length too long for the address family"));
        }
        let addr = mask_raw(addr, len);
        Ok(Cidr { addr, len })
    }

    /// Whether `ip` is in the range, as written or as the host it names: an IPv4 range
    /// also holds the IPv4-embedded IPv6 forms of its addresses that [`IpPrefix`] lists
    /// (all but a network-specific NAT64 prefix, which only a key knows), and an IPv6
    /// range holds the IPv6 addresses in it (`64:ff9b::/96` holds every NAT64 address).
    ///
    /// ```
    /// use tollgate_http::Cidr;
    /// let net = Cidr::parse("10.0.0.0/8")?;
    /// assert!(net.contains("::ffff:10.1.2.3".parse()?));
    /// assert!(net.contains("64:ff9b::10.1.2.3".parse()?));
    /// assert!(Cidr::parse("64:ff9b::/96")?.contains("64:ff9b::10.1.2.3".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        let holds =
            |ip: IpAddr| ip.is_ipv4() == self.addr.is_ipv4() && mask_raw(ip, self.len) == self.addr;
        holds(ip)
            || match ip {
                IpAddr::V6(v6) => embedded_ipv4(v6, None).is_some_and(|v4| holds(IpAddr::V4(v4))),
                IpAddr::V4(_) => false,
            }
    }
}

/// `ip` with every bit past `len` cleared, in its own family.
fn mask_raw(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(mask32(u32::from(v4), len))),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(mask128(u128::from(v6), len))),
    }
}

/// A CIDR range that does not parse: the text, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CidrError {
    /// The text given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid CIDR range {:?}: {}", self.text, self.reason)
    }
}

impl std::error::Error for CidrError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }

    #[test]
    fn masks_and_clamps() {
        assert_eq!(
            IpPrefix::new(24, 48).mask(ip("192.0.2.77")),
            ip("192.0.2.0")
        );
        assert_eq!(
            IpPrefix::new(24, 48).mask(ip("2001:db8:aa:bb::1")),
            ip("2001:db8:aa::")
        );
        assert_eq!(IpPrefix::new(0, 0).mask(ip("2001:db8::1")), ip("::"));
        assert_eq!(IpPrefix::new(99, 200), IpPrefix::new(32, 128));
        assert_eq!(
            IpPrefix::new(32, 128).mask(ip("2001:db8::1")),
            ip("2001:db8::1")
        );
    }

    /// RFC 6052 §2.4's table: 192.0.2.33 under 2001:db8::/32 … 2001:db8:122:344::/96.
    #[test]
    fn nat64_prefix_layouts_of_rfc6052() {
        let v4 = ip("192.0.2.33");
        for (prefix, embedded) in [
            ("2001:db8::/32", "2001:db8:c000:221::"),
            ("2001:db8:100::/40", "2001:db8:1c0:2:21::"),
            ("2001:db8:122::/48", "2001:db8:122:c000:2:2100::"),
            ("2001:db8:122:300::/56", "2001:db8:122:3c0:0:221::"),
            ("2001:db8:122:344::/64", "2001:db8:122:344:c0:2:2100:0"),
            ("2001:db8:122:344::/96", "2001:db8:122:344::192.0.2.33"),
        ] {
            let key = IpPrefix::default().nat64(prefix).unwrap_or_default();
            assert_eq!(key.host(ip(embedded)), v4, "{prefix}");
            assert_eq!(key.mask(ip(embedded)), v4, "{prefix}");
            // Without the prefix it is an IPv6 address like any other.
            assert_eq!(IpPrefix::default().host(ip(embedded)), ip(embedded));
        }
        // /32../64: bits 64..72 (the u octet) must be zero.
        let key = IpPrefix::default()
            .nat64("2001:db8:122:344::/64")
            .unwrap_or_default();
        let bad_u = ip("2001:db8:122:344:1c0:2:2100:0");
        assert_eq!(key.host(bad_u), bad_u);
        for (text, reason) in [
            (
                "2001:db8::/80",
                "a NAT64 prefix is a /32, /40, /48, /56, /64 or /96",
            ),
            ("10.0.0.0/8", "a NAT64 prefix is an IPv6 prefix"),
        ] {
            assert_eq!(
                IpPrefix::default().nat64(text).map_err(|e| e.reason),
                Err(reason)
            );
        }
        assert!(IpPrefix::default().nat64("nope").is_err());
    }

    #[test]
    fn embedded_ipv4_forms() {
        let key = IpPrefix::default();
        for (v6, v4) in [
            ("::ffff:198.51.100.7", "198.51.100.7"),
            ("0:0:0:0:0:ffff:c633:6407", "198.51.100.7"),
            ("::ffff:0:198.51.100.7", "198.51.100.7"),
            ("::198.51.100.7", "198.51.100.7"),
            ("64:ff9b::198.51.100.7", "198.51.100.7"),
            ("64:ff9b::c633:6407", "198.51.100.7"),
        ] {
            assert_eq!(key.host(ip(v6)), ip(v4), "{v6}");
        }
        // Unspecified, loopback, a neighbour of the well-known prefix, RFC 8215's
        // local-use /48 (its layout is the operator's): IPv6.
        for v6 in [
            "::",
            "::1",
            "64:ff9b:0:0:1::1",
            "64:ff9b:1::c633:6407",
            "::fffe:c633:6407",
        ] {
            assert_eq!(key.host(ip(v6)), ip(v6), "{v6}");
        }
        assert_eq!(key.mask(ip("::1")), ip("::"));
    }

    #[test]
    fn cidr_errors() {
        assert!(Cidr::parse("10.0.0.0/x").is_err());
        assert!(Cidr::parse("10.0.0.0/+8").is_err());
        assert!(Cidr::parse("10.0.0.0/").is_err());
        assert!(Cidr::parse("nope/8").is_err());
        assert!(Cidr::parse("::/129").is_err());
        assert!(Cidr::parse("::ffff:10.0.0.0/8").is_ok());
    }
}
