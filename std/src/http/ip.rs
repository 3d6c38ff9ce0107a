//! IP addresses as rate-limit keys: [`IpPrefix`] (one key per IPv4 address or per IPv6
//! /64 network, by default) and [`TrustedProxies`] (the CIDR ranges whose
//! `X-Forwarded-For` is believed).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{CidrError, ForwardedForError};

/// How much of a client's address identifies it: the first `v4` bits of an IPv4 address,
/// the first `v6` bits of an IPv6 one. IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) count
/// as IPv4.
///
/// The IPv6 default is /64 because one subscriber usually gets a whole /64 (often a /56 or
/// /48): keying on the full 128 bits would hand every client 2⁶⁴ fresh allowances.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::http::IpPrefix;
/// let prefix = IpPrefix::default();
/// let a: IpAddr = "2001:db8:1:2:aaaa::1".parse()?;
/// let b: IpAddr = "2001:db8:1:2:bbbb::9".parse()?;
/// assert_eq!(prefix.mask(a), prefix.mask(b));
/// assert_eq!(prefix.mask(a).to_string(), "2001:db8:1:2::");
/// assert_eq!(prefix.mask("::ffff:192.0.2.7".parse()?).to_string(), "192.0.2.7");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IpPrefix {
    v4: u8,
    v6: u8,
}

impl Default for IpPrefix {
    /// IPv4 /32 (one key per address), IPv6 /64 (one key per subscriber network).
    fn default() -> IpPrefix {
        IpPrefix { v4: 32, v6: 64 }
    }
}

impl IpPrefix {
    /// Prefix lengths for IPv4 and IPv6 addresses, clamped to 32 and 128.
    pub const fn new(v4: u8, v6: u8) -> IpPrefix {
        IpPrefix {
            v4: if v4 > 32 { 32 } else { v4 },
            v6: if v6 > 128 { 128 } else { v6 },
        }
    }

    /// The IPv4 prefix length.
    pub const fn v4(&self) -> u8 {
        self.v4
    }

    /// The IPv6 prefix length.
    pub const fn v6(&self) -> u8 {
        self.v6
    }

    /// `ip` with every bit past its prefix cleared (IPv4-mapped IPv6 as IPv4).
    pub fn mask(&self, ip: IpAddr) -> IpAddr {
        match ip.to_canonical() {
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
    /// use tollgate::http::Cidr;
    /// let net = Cidr::parse("10.0.0.0/8")?;
    /// assert!(net.contains("10.1.2.3".parse()?));
    /// assert!(!net.contains("11.0.0.1".parse()?));
    /// assert!(Cidr::parse("10.0.0.0/33").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
            Some(l) => l
                .parse::<u8>()
                .map_err(|_| err("prefix length not a number"))?,
        };
        if len > max {
            return Err(err("prefix length too long for the address family"));
        }
        let addr = IpPrefix::new(len, len).mask(addr);
        Ok(Cidr { addr, len })
    }

    /// Whether `ip` (IPv4-mapped IPv6 counted as IPv4) is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        if ip.is_ipv4() != self.addr.is_ipv4() {
            return false;
        }
        IpPrefix::new(self.len, self.len).mask(ip) == self.addr
    }
}

/// The proxies in front of the server whose `X-Forwarded-For` entries are believed.
///
/// The client is the rightmost untrusted hop: walking `X-Forwarded-For` from the right
/// (the entry the nearest proxy appended), trusted addresses are skipped and the first
/// untrusted one is the client. Entries left of it were written by the client itself and
/// may be anything. A request whose TCP peer is not trusted keeps its peer address as the
/// key, whatever `X-Forwarded-For` it sends.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::http::TrustedProxies;
/// let trusted = TrustedProxies::new(["10.0.0.0/8", "::1"])?;
/// let proxy: IpAddr = "10.0.0.5".parse()?;
/// // The client claims to be 1.1.1.1; the proxy saw 203.0.113.9.
/// assert_eq!(trusted.client(proxy, ["1.1.1.1, 203.0.113.9"]), Ok("203.0.113.9".parse()?));
/// // The same header straight from an untrusted peer is ignored.
/// let peer: IpAddr = "198.51.100.1".parse()?;
/// assert_eq!(trusted.client(peer, ["1.1.1.1"]), Ok(peer));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    ranges: Vec<Cidr>,
}

impl TrustedProxies {
    /// The ranges `cidrs` (see [`Cidr::parse`]).
    pub fn new<I, T>(cidrs: I) -> Result<TrustedProxies, CidrError>
    where
        I: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        let ranges = cidrs
            .into_iter()
            .map(|c| Cidr::parse(c.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(TrustedProxies { ranges })
    }

    /// Whether `ip` is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.contains(ip))
    }

    /// The client behind `peer`, given the request's `X-Forwarded-For` field values in
    /// order (several fields are one comma-separated list). `peer` itself when it is not
    /// trusted or there is no entry; the leftmost entry when every entry is trusted.
    pub fn client<I, T>(&self, peer: IpAddr, forwarded_for: I) -> Result<IpAddr, ForwardedForError>
    where
        I: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        if !self.contains(peer) {
            return Ok(peer);
        }
        let fields: Vec<T> = forwarded_for.into_iter().collect();
        let mut client = peer;
        for field in fields.iter().rev() {
            for entry in field.as_ref().rsplit(',') {
                let entry = entry.trim();
                if entry.is_empty() {
                    continue;
                }
                let ip = parse_hop(entry).ok_or(ForwardedForError)?;
                if !self.contains(ip) {
                    return Ok(ip);
                }
                client = ip;
            }
        }
        Ok(client)
    }
}

/// An `X-Forwarded-For` entry: an address, optionally with a port (`[v6]:port`,
/// `v4:port`).
fn parse_hop(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(sock) = entry.parse::<std::net::SocketAddr>() {
        return Some(sock.ip().to_canonical());
    }
    let unbracketed = entry.strip_prefix('[')?.strip_suffix(']')?;
    unbracketed
        .parse::<IpAddr>()
        .ok()
        .map(|ip| ip.to_canonical())
}

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

    #[test]
    fn rightmost_untrusted_hop() {
        let t = TrustedProxies::new(["10.0.0.0/8", "2001:db8::/32"]).unwrap_or_default();
        let proxy = ip("10.9.9.9");
        assert_eq!(
            t.client(proxy, ["6.6.6.6, 7.7.7.7, 10.1.1.1"]),
            Ok(ip("7.7.7.7"))
        );
        assert_eq!(
            t.client(proxy, ["6.6.6.6", "7.7.7.7:443"]),
            Ok(ip("7.7.7.7"))
        );
        assert_eq!(t.client(proxy, ["[2001:db9::1]:80"]), Ok(ip("2001:db9::1")));
        assert_eq!(t.client(proxy, ["10.2.2.2, 10.3.3.3"]), Ok(ip("10.2.2.2")));
        assert_eq!(t.client(proxy, Vec::<&str>::new()), Ok(proxy));
        assert_eq!(t.client(proxy, ["bogus"]), Err(ForwardedForError));
        // Garbage left of the client is never read.
        assert_eq!(t.client(proxy, ["bogus, 7.7.7.7"]), Ok(ip("7.7.7.7")));
        assert_eq!(t.client(ip("8.8.8.8"), ["1.2.3.4"]), Ok(ip("8.8.8.8")));
    }

    #[test]
    fn cidr_errors() {
        assert!(Cidr::parse("10.0.0.0/x").is_err());
        assert!(Cidr::parse("nope/8").is_err());
        assert!(Cidr::parse("::/129").is_err());
        assert!(Cidr::parse("::ffff:10.0.0.0/8").is_ok());
        assert!(TrustedProxies::new(["10.0.0.0/8", "x"]).is_err());
    }
}
