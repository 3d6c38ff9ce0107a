//! [`TrustedProxies`]: who the client is behind the proxies in front of the server — the
//! rightmost untrusted hop of `X-Forwarded-For`, read as bytes — and
//! [`ForwardedForError`], a trusted hop's entry that is not an address.

use core::fmt;
use std::net::IpAddr;

use super::{Cidr, CidrError};

/// The proxies in front of the server whose `X-Forwarded-For` entries are believed.
///
/// The client is the rightmost untrusted hop: walking `X-Forwarded-For` from the right
/// (the entry the nearest proxy appended), trusted addresses are skipped and the first
/// untrusted one is the client. A request whose TCP peer is not trusted keeps its peer
/// address as the key, whatever `X-Forwarded-For` it sends.
///
/// The field is read as bytes, entry by entry (several header lines are one list, in
/// order; empty list elements are skipped, as RFC 9110 says). What is left of the client's
/// hop is what the client itself sent, which a proxy passes on verbatim: it is never read,
/// so nothing in it (an address, garbage, a byte outside ASCII) changes the key. An entry
/// that is not an address *right* of the client's hop, among the trusted hops, was written
/// by a trusted proxy (one that calls its peer `unknown` or `unix:`, or a chain that is
/// misconfigured): the chain cannot be followed past it and skipping it would let the
/// client's own part decide the key, so it is a [`ForwardedForError`], which the layer
/// counts as a bad key and answers as [`OnBadKey`](super::OnBadKey) says. A client can
/// only reach that case by being trusted itself (connecting from a trusted address), and
/// such a client could name any address anyway.
///
/// The layer reads `X-Forwarded-For` only: `Forwarded` (RFC 7239) and `X-Real-IP` are
/// not read.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate_http::TrustedProxies;
/// let trusted = TrustedProxies::new(["10.0.0.0/8", "::1"])?;
/// let proxy: IpAddr = "10.0.0.5".parse()?;
/// // The client claims to be 1.1.1.1; the proxy saw 203.0.113.9.
/// assert_eq!(trusted.client(proxy, ["1.1.1.1, 203.0.113.9"]), Ok("203.0.113.9".parse()?));
/// // Bytes the client wrote into its own part do not matter.
/// assert_eq!(trusted.client(proxy, [&b"\xff\xfe, 203.0.113.9"[..]]), Ok("203.0.113.9".parse()?));
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
    ///
    /// # Errors
    ///
    /// The first of `cidrs` that [`Cidr::parse`] refuses.
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

    /// Whether `ip` is a trusted proxy (see [`Cidr::contains`]).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.contains(ip))
    }

    /// The client behind `peer`, given the request's `X-Forwarded-For` field values in
    /// order, as bytes or text (several fields are one comma-separated list). `peer`
    /// itself when it is not trusted or there is no entry; the leftmost entry when every
    /// entry is trusted; [`ForwardedForError`] when an entry right of the client's hop is
    /// not an address. IPv4-mapped addresses come back as IPv4; other embedded forms as
    /// written (a key's [`IpPrefix`](super::IpPrefix) reads the IPv4 out of them).
    ///
    /// # Errors
    ///
    /// An entry right of the client's hop (one a trusted proxy wrote) is not an address.
    pub fn client<I, T>(&self, peer: IpAddr, forwarded_for: I) -> Result<IpAddr, ForwardedForError>
    where
        I: IntoIterator<Item = T>,
        T: AsRef<[u8]>,
    {
        if !self.contains(peer) {
            return Ok(peer);
        }
        let fields: Vec<T> = forwarded_for.into_iter().collect();
        self.walk(peer, fields.iter().rev().map(AsRef::as_ref))
    }

    /// [`client`](Self::client) with the fields given last first, without collecting them
    /// (what the layer calls per request: no allocation).
    pub(crate) fn client_rev<'a>(
        &self,
        peer: IpAddr,
        fields_last_first: impl Iterator<Item = &'a [u8]>,
    ) -> Result<IpAddr, ForwardedForError> {
        if !self.contains(peer) {
            return Ok(peer);
        }
        self.walk(peer, fields_last_first)
    }

    /// The walk from the right, `peer` trusted.
    fn walk<'a>(
        &self,
        peer: IpAddr,
        fields_last_first: impl Iterator<Item = &'a [u8]>,
    ) -> Result<IpAddr, ForwardedForError> {
        let mut client = peer;
        for field in fields_last_first {
            for entry in field.rsplit(|&b| b == b',') {
                let entry = entry.trim_ascii();
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
/// `v4:port`), in ASCII; anything else (including any byte outside ASCII) is `None`.
fn parse_hop(entry: &[u8]) -> Option<IpAddr> {
    // The longest address with a port, `[ffff:...:255.255.255.255]:65535`, is 53 bytes.
    if entry.len() > 64 {
        return None;
    }
    let entry = std::str::from_utf8(entry).ok()?;
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

/// An `X-Forwarded-For` entry that is not an IP address, met before any untrusted hop:
/// right of the client's hop, so written by a trusted proxy (see
/// [`TrustedProxies`]), never by the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardedForError;

impl fmt::Display for ForwardedForError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("X-Forwarded-For entry is not an IP address")
    }
}

impl std::error::Error for ForwardedForError {}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
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
    fn trust_holds_every_form_of_an_address() {
        let t = TrustedProxies::new(["10.0.0.0/8", "64:ff9b::/96"]).unwrap_or_default();
        assert!(t.contains(ip("10.1.2.3")));
        assert!(t.contains(ip("::ffff:10.1.2.3")));
        assert!(t.contains(ip("64:ff9b::10.1.2.3")));
        assert!(t.contains(ip("64:ff9b::198.51.100.7")));
        assert!(!t.contains(ip("198.51.100.7")));
        assert!(!t.contains(ip("::1")));
        let v4_only = TrustedProxies::new(["10.0.0.0/8"]).unwrap_or_default();
        assert!(!v4_only.contains(ip("64:ff9b::198.51.100.7")));
        assert!(v4_only.contains(ip("::10.0.0.9")));
    }

    #[test]
    fn bytes_left_of_the_client_are_never_read() {
        let t = TrustedProxies::new(["10.0.0.0/8"]).unwrap_or_default();
        let proxy = ip("10.9.9.9");
        let fields: [&[u8]; 3] = [b"\xff\x00\r\n,,", b"  , 7.7.7.7 ,\t", b"10.1.1.1"];
        assert_eq!(t.client(proxy, fields), Ok(ip("7.7.7.7")));
        // Garbage among the trusted hops is the proxies' doing: an error, whatever follows.
        assert_eq!(
            t.client(proxy, [&b"7.7.7.7, \xff, 10.1.1.1"[..]]),
            Err(ForwardedForError)
        );
        assert_eq!(
            t.client(proxy, ["7.7.7.7, unknown"]),
            Err(ForwardedForError)
        );
        // A hop's address cannot run on into the next entry.
        assert_eq!(
            t.client(proxy, [&b"7.7.7.7\xff"[..]]),
            Err(ForwardedForError)
        );
        let long = format!("{}1.2.3.4", " ".repeat(70));
        assert_eq!(t.client(proxy, [long.as_str()]), Ok(ip("1.2.3.4")));
        assert_eq!(
            t.client(proxy, [format!("0{}", "0".repeat(70))]),
            Err(ForwardedForError)
        );
    }

    mod props {
        use std::net::{Ipv4Addr, Ipv6Addr};

        use super::super::*;
        use proptest::prelude::*;

        fn trusted() -> TrustedProxies {
            TrustedProxies::new(["10.0.0.0/8", "2001:db8::/32"]).unwrap_or_default()
        }

        /// An address as a proxy may write it: bare, with a port, bracketed, mapped.
        fn written(ip: IpAddr, style: u8) -> String {
            match (ip, style % 4) {
                (IpAddr::V4(v4), 0) => v4.to_string(),
                (IpAddr::V4(v4), 1) => format!("{v4}:{}", 1000 + u16::from(style)),
                (IpAddr::V4(v4), 2) => format!("::ffff:{v4}"),
                (IpAddr::V4(v4), _) => format!("[::ffff:{v4}]:443"),
                (IpAddr::V6(v6), 0 | 2) => v6.to_string(),
                (IpAddr::V6(v6), 1) => format!("[{v6}]:8080"),
                (IpAddr::V6(v6), _) => format!("[{v6}]"),
            }
        }

        fn trusted_hop() -> impl Strategy<Value = IpAddr> {
            prop_oneof![
                any::<[u8; 3]>().prop_map(|[a, b, c]| IpAddr::V4(Ipv4Addr::new(10, a, b, c))),
                any::<u64>().prop_map(|x| IpAddr::V6(Ipv6Addr::from(
                    (0x2001_0db8_u128 << 96) | u128::from(x)
                ))),
            ]
        }

        fn untrusted_hop() -> impl Strategy<Value = IpAddr> {
            prop_oneof![
                (11u8..=223, any::<[u8; 3]>())
                    .prop_map(|(a, [b, c, d])| IpAddr::V4(Ipv4Addr::new(a, b, c, d))),
                (0x2002u128..0xfe00, any::<u64>()).prop_map(|(top, low)| IpAddr::V6(
                    Ipv6Addr::from((top << 112) | u128::from(low))
                )),
            ]
        }

        /// Header bytes as an attacker or a broken proxy might write them: addresses,
        /// separators, digits, bytes outside ASCII, controls.
        fn noise() -> impl Strategy<Value = Vec<u8>> {
            let piece = prop_oneof![
                3 => any::<u8>().prop_map(|b| vec![b]),
                2 => prop::sample::select(vec![&b","[..], b" ", b"\t", b":", b".", b"[", b"]", b"\xff", b"\xc3\xa9"])
                    .prop_map(<[u8]>::to_vec),
                2 => (0u8..=255).prop_map(|d| d.to_string().into_bytes()),
                2 => (trusted_hop(), any::<u8>()).prop_map(|(ip, s)| written(ip, s).into_bytes()),
                2 => (untrusted_hop(), any::<u8>()).prop_map(|(ip, s)| written(ip, s).into_bytes()),
            ];
            prop::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            /// Whatever the client writes (any bytes, any number of lines), the key is
            /// the hop its edge proxy appended: never an address from the client's own
            /// part, never one of the trusted hops to its right.
            #[test]
            fn the_clients_part_never_changes_the_client(
                own in prop::collection::vec(noise(), 0..4),
                client in untrusted_hop(),
                hops in prop::collection::vec(trusted_hop(), 0..4),
                styles in prop::collection::vec(any::<u8>(), 5),
                one_line in any::<bool>(),
            ) {
                let mut appended = vec![written(client, styles[0])];
                appended.extend(hops.iter().zip(&styles[1..]).map(|(h, &s)| written(*h, s)));
                let mut lines: Vec<Vec<u8>> = own;
                if one_line {
                    // Each proxy appends ", hop" to the last line.
                    let mut last = lines.pop().unwrap_or_default();
                    for hop in &appended {
                        if !last.is_empty() {
                            last.extend_from_slice(b", ");
                        }
                        last.extend_from_slice(hop.as_bytes());
                    }
                    lines.push(last);
                } else {
                    lines.extend(appended.iter().map(|h| h.clone().into_bytes()));
                }
                let got = trusted().client(ip("10.0.0.1"), &lines);
                prop_assert_eq!(got, Ok(client.to_canonical()), "{:?}", lines);
            }

            /// On any bytes: no panic, and the answer is what the rightmost-untrusted
            /// rule says: every entry right of the answer is a trusted hop's address
            /// (an untrusted answer is the first address that is not; a trusted one is
            /// the leftmost, when all are), and an error means a trusted hop's entry
            /// was not an address.
            #[test]
            fn any_bytes_give_the_rightmost_untrusted_hop(lines in prop::collection::vec(noise(), 0..4)) {
                let t = trusted();
                let peer = ip("10.0.0.1");
                let got = t.client(peer, &lines);
                let entries: Vec<&[u8]> = lines
                    .iter()
                    .flat_map(|l| l.split(|&b| b == b','))
                    .map(<[u8]>::trim_ascii)
                    .filter(|e| !e.is_empty())
                    .collect();
                // Right to left: the trusted run, then what ends it.
                let mut end = None;
                for (i, e) in entries.iter().enumerate().rev() {
                    match parse_hop(e) {
                        Some(a) if t.contains(a) => continue,
                        other => {
                            end = Some((i, other));
                            break;
                        }
                    }
                }
                match end {
                    Some((_, None)) => prop_assert_eq!(got, Err(ForwardedForError)),
                    Some((_, Some(a))) => {
                        prop_assert!(!t.contains(a));
                        prop_assert_eq!(got, Ok(a));
                    }
                    None => {
                        let leftmost = entries.first().and_then(|e| parse_hop(e)).unwrap_or(peer);
                        prop_assert_eq!(got, Ok(leftmost));
                        prop_assert!(t.contains(leftmost));
                    }
                }
                // An untrusted peer is its own client, whatever the header says.
                prop_assert_eq!(t.client(ip("198.51.100.1"), &lines), Ok(ip("198.51.100.1")));
            }
        }

        fn ip(s: &str) -> IpAddr {
            s.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
        }
    }

    #[test]
    fn a_range_that_does_not_parse_is_an_error() {
        assert!(TrustedProxies::new(["10.0.0.0/8", "x"]).is_err());
    }
}
