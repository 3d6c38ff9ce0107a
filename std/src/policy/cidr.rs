//! [`Cidr`]: an IP network of an allow or deny list entry (`10.0.0.0/8`, `2001:db8::/32`),
//! parsed strictly (a set host bit is a mistake named, not masked away), and the address a
//! client key names, if it names one.

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IP network: an address family, a prefix length and the network's bits (an IPv4
/// network's in the low 32 bits), every bit past the prefix clear.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Cidr {
    pub(crate) v6: bool,
    pub(crate) len: u8,
    pub(crate) bits: u128,
}

impl Cidr {
    /// Parses `a.b.c.d/n` or `x:y::/n` (an IPv4-mapped IPv6 network, `::ffff:a.b.c.d/n`
    /// with `n ≥ 96`, is the IPv4 network it maps). The message says what is wrong.
    pub(crate) fn parse(text: &str) -> Result<Cidr, String> {
        let Some((addr, len)) = text.split_once('/') else {
            return Err(format!(
                "\"{text}\": not a network: write it with its prefix length (\"{text}/32\" or \"{text}/128\" for one address)"
            ));
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("\"{text}\": \"{addr}\" is not an IP address"))?;
        let max: u8 = if addr.is_ipv4() { 32 } else { 128 };
        // Digits only: `u8`'s parser would take a sign (`/+8`).
        let digits = !len.is_empty() && len.bytes().all(|b| b.is_ascii_digit());
        let len: u8 = match len.parse() {
            Ok(len) if digits && len <= max => len,
            _ => {
                return Err(format!(
                    "\"{text}\": the prefix length must be a number from 0 to {max}"
                ))
            }
        };
        let (v6, bits, len) = match addr {
            IpAddr::V4(v4) => (false, u128::from(u32::from(v4)), len),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) if len >= 96 => (false, u128::from(u32::from(v4)), len - 96),
                _ => (true, u128::from(v6), len),
            },
        };
        let cidr = Cidr {
            v6,
            len,
            bits: mask(bits, v6, len),
        };
        if cidr.bits != bits {
            return Err(format!(
                "\"{text}\": host bits set past the prefix length (the network is {cidr})"
            ));
        }
        Ok(cidr)
    }
}

/// `bits` (of an IPv6 address if `v6`, else of an IPv4 one) with every bit past `len`
/// clear.
#[inline]
pub(crate) fn mask(bits: u128, v6: bool, len: u8) -> u128 {
    let width: u32 = if v6 { 128 } else { 32 };
    let keep = u32::from(len).min(width);
    if keep == 0 {
        return 0;
    }
    // The top `keep` bits of a `width`-bit number.
    let ones = u128::MAX >> (128 - keep) << (width - keep);
    bits & ones
}

/// The address a client key names, as (IPv6?, bits): the key is an IP address in any of
/// its text forms (an IPv4-mapped IPv6 address is the IPv4 address it maps); `None` for
/// any other key. No allocation.
#[inline]
pub(crate) fn address(key: &str) -> Option<(bool, u128)> {
    // Most keys are not addresses: rule them out before the parser looks at them.
    let first = *key.as_bytes().first()?;
    if !(first.is_ascii_hexdigit() || first == b':') || key.len() > 45 {
        return None;
    }
    match key.parse::<IpAddr>().ok()?.to_canonical() {
        IpAddr::V4(v4) => Some((false, u128::from(u32::from(v4)))),
        IpAddr::V6(v6) => Some((true, u128::from(v6))),
    }
}

/// `10.0.0.0/8`, `2001:db8::/32`: the network in its canonical text.
impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.v6 {
            write!(f, "{}/{}", Ipv6Addr::from(self.bits), self.len)
        } else {
            // Truncation: an IPv4 network's bits are its low 32.
            #[allow(clippy::cast_possible_truncation)]
            let v4 = Ipv4Addr::from(self.bits as u32);
            write!(f, "{v4}/{}", self.len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_parse_strictly_and_print_canonically() {
        for (text, want) in [
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("192.0.2.7/32", "192.0.2.7/32"),
            ("2001:DB8::/32", "2001:db8::/32"),
            ("::/0", "::/0"),
            ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
            ("2001:db8::1/128", "2001:db8::1/128"),
        ] {
            assert_eq!(
                Cidr::parse(text).map(|c| c.to_string()),
                Ok(want.into()),
                "{text}"
            );
        }
        for (text, says) in [
            (
                "10.0.0.1/8",
                "host bits set past the prefix length (the network is 10.0.0.0/8)",
            ),
            ("10.0.0.0/33", "from 0 to 32"),
            ("2001:db8::/129", "from 0 to 128"),
            ("10.0.0.0/x", "from 0 to 32"),
            ("10.0.0.0", "not a network"),
            ("example.com/8", "is not an IP address"),
            ("", "not a network"),
        ] {
            let err = Cidr::parse(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    /// Whether `net` holds `(v6, bits)`, an address.
    fn holds(net: &Cidr, (v6, bits): (bool, u128)) -> bool {
        net.v6 == v6 && mask(bits, v6, net.len) == net.bits
    }

    #[test]
    fn networks_hold_their_addresses_only() {
        let net = |t| Cidr::parse(t).unwrap();
        let at = |k| address(k).unwrap();
        let a = at("10.255.0.1");
        assert!(holds(&net("10.0.0.0/8"), a));
        assert!(!holds(&net("11.0.0.0/8"), a));
        assert!(holds(&net("0.0.0.0/0"), a));
        assert!(!holds(&net("::/0"), a), "families never mix");
        let a = at("::ffff:10.1.2.3");
        assert!(holds(&net("10.0.0.0/8"), a), "mapped addresses are IPv4");
        let a = at("2001:db8:1:2::");
        assert!(holds(&net("2001:db8::/32"), a));
        assert!(!holds(&net("2001:db9::/32"), a));
        for key in [
            "acct_123",
            "",
            "deadbeef",
            "10.0.0.0/8",
            "g::1",
            "10.0.0.256",
        ] {
            assert_eq!(address(key), None, "{key}");
        }
    }
}
