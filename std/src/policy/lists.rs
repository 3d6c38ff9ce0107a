//! [`Lists`]: the allow and deny lists, compiled: client keys found by the fingerprint a
//! check computes anyway, networks by longest prefix (one table probe per prefix length in
//! use, longest first). An empty list costs a check one branch.

use hashbrown::HashTable;

use super::cidr::{self, Cidr};
use super::index::Index;
use super::{ListEntryConfig, Listing, ListingKind, PolicyConfig, PolicyConfigError};

/// The longest `reason` accepted, in bytes: it is sent to refused clients.
pub(crate) const MAX_REASON_LEN: usize = 256;

/// The networks of one prefix length, by their bits, each with its listing.
#[derive(Debug)]
struct Level {
    len: u8,
    nets: HashTable<(u128, u32)>,
}

/// The allow and deny entries of a rule set: which [`Listing`] (by its index in the set's
/// listings) a client meets, if any (see [`ListEntryConfig`] for the precedence).
#[derive(Debug, Default)]
pub(crate) struct Lists {
    /// Whether there is any entry at all (the one branch a check without lists takes).
    any: bool,
    clients: Index<u32>,
    /// IPv4 and IPv6 networks, by prefix length, longest first.
    v4: Vec<Level>,
    v6: Vec<Level>,
}

/// A network's hash: its bits folded and mixed (a network's low bits are mostly clear,
/// so they must be mixed into the bits the table indexes by).
#[inline]
fn hash(bits: u128) -> u64 {
    // Truncation: the two halves, folded.
    #[allow(clippy::cast_possible_truncation)]
    let mut x = (bits as u64) ^ ((bits >> 64) as u64).rotate_left(29);
    // The 64-bit finalizer of MurmurHash3.
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Checks a `reason` at `path`: not blank, no control character, at most
/// [`MAX_REASON_LEN`] bytes (it is sent to the clients it refuses).
pub(crate) fn check_reason(path: &str, reason: Option<&str>) -> Result<(), PolicyConfigError> {
    let Some(reason) = reason else {
        return Ok(());
    };
    let error = |m: String| Err(PolicyConfigError::new(format!("{path}.reason"), m));
    if reason.trim().is_empty() {
        return error("must not be empty (omit it to give none)".into());
    }
    if let Some(c) = reason.chars().find(|c| c.is_control()) {
        return error(format!(
            "{c:?} is not allowed (a reason is one line of text)"
        ));
    }
    if reason.len() > MAX_REASON_LEN {
        return error(format!("at most {MAX_REASON_LEN} bytes"));
    }
    Ok(())
}

impl Lists {
    /// Validates and indexes `config`'s allow and deny lists, adding a [`Listing`] per
    /// entry to `listings`.
    pub(crate) fn compile(
        config: &PolicyConfig,
        listings: &mut Vec<Listing>,
    ) -> Result<Lists, PolicyConfigError> {
        let mut lists = Lists::default();
        let kinds = [
            (
                "allow",
                &config.allow,
                ListingKind::AllowClient,
                ListingKind::AllowCidr,
            ),
            (
                "deny",
                &config.deny,
                ListingKind::DenyClient,
                ListingKind::DenyCidr,
            ),
        ];
        for (list, entries, by_client, by_cidr) in kinds {
            for (i, entry) in entries.iter().enumerate() {
                lists.add(&format!("{list}[{i}]"), entry, by_client, by_cidr, listings)?;
            }
        }
        lists.any = !listings.is_empty();
        // Longest prefix first: the first level holding a client's network decides.
        for levels in [&mut lists.v4, &mut lists.v6] {
            levels.sort_by_key(|level| core::cmp::Reverse(level.len));
        }
        Ok(lists)
    }

    /// Adds `entry`, at `path` (`deny[3]`), of kind `by_client` or `by_cidr`.
    fn add(
        &mut self,
        path: &str,
        entry: &ListEntryConfig,
        by_client: ListingKind,
        by_cidr: ListingKind,
        listings: &mut Vec<Listing>,
    ) -> Result<(), PolicyConfigError> {
        check_reason(path, entry.reason.as_deref())?;
        let at = u32::try_from(listings.len())
            .map_err(|_| PolicyConfigError::new(path, "at most 2^32 entries"))?;
        let taken = |other: u32| {
            let other = listings.get(other as usize).map_or("?", Listing::path);
            format!("already listed at {other} (a client or network is listed once, in one list)")
        };
        let (kind, subject) = match (&entry.client, &entry.cidr) {
            (None, None) => {
                return Err(PolicyConfigError::new(
                    path,
                    "an entry needs `client` (a client key) or `cidr` (a network)",
                ))
            }
            (Some(_), Some(_)) => {
                return Err(PolicyConfigError::new(
                    format!("{path}.cidr"),
                    "an entry has `client` or `cidr`, not both",
                ))
            }
            (Some(client), None) => {
                if client.is_empty() {
                    return Err(PolicyConfigError::new(
                        format!("{path}.client"),
                        "must not be empty",
                    ));
                }
                let slot = *self.clients.get_or_insert_with(client, || at);
                if slot != at {
                    return Err(PolicyConfigError::new(
                        format!("{path}.client"),
                        format!("{client:?} is {}", taken(slot)),
                    ));
                }
                (by_client, client.clone())
            }
            (None, Some(text)) => {
                let net = Cidr::parse(text)
                    .map_err(|m| PolicyConfigError::new(format!("{path}.cidr"), m))?;
                let levels = if net.v6 { &mut self.v6 } else { &mut self.v4 };
                let level = match levels.iter().position(|l| l.len == net.len) {
                    Some(i) => &mut levels[i],
                    None => {
                        levels.push(Level {
                            len: net.len,
                            nets: HashTable::new(),
                        });
                        let last = levels.len() - 1;
                        &mut levels[last]
                    }
                };
                let found = level
                    .nets
                    .find(hash(net.bits), |&(bits, _)| bits == net.bits)
                    .map(|&(_, other)| other);
                if let Some(other) = found {
                    return Err(PolicyConfigError::new(
                        format!("{path}.cidr"),
                        format!("{net} is {}", taken(other)),
                    ));
                }
                level
                    .nets
                    .insert_unique(hash(net.bits), (net.bits, at), |&(bits, _)| hash(bits));
                (by_cidr, net.to_string())
            }
        };
        listings.push(Listing::new(
            kind,
            path.to_owned(),
            subject,
            entry.reason.as_deref(),
        ));
        Ok(())
    }

    /// The listing of the entry `client` (whose fingerprint is `client_hash`) meets, if
    /// any: its `client` entry, else the longest network holding it (a key that is an IP
    /// address). No allocation.
    #[inline]
    pub(crate) fn find(&self, client: &str, client_hash: u64) -> Option<u32> {
        if !self.any {
            return None;
        }
        self.find_listed(client, client_hash)
    }

    /// [`find`](Self::find) in lists with entries.
    fn find_listed(&self, client: &str, client_hash: u64) -> Option<u32> {
        if let Some(&at) = self.clients.get(client, || client_hash) {
            return Some(at);
        }
        if self.v4.is_empty() && self.v6.is_empty() {
            return None;
        }
        let (v6, bits) = cidr::address(client)?;
        let levels = if v6 { &self.v6 } else { &self.v4 };
        levels.iter().find_map(|level| {
            let net = cidr::mask(bits, v6, level.len);
            level
                .nets
                .find(hash(net), |&(bits, _)| bits == net)
                .map(|&(_, at)| at)
        })
    }
}
