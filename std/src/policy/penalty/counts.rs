//! [`Counts`]: a counter per client in a bounded, lock-free keyed table (the tier stores'
//! kind), allocated at the first write: which of a rewarded client's checks this process
//! charges.

use std::sync::OnceLock;

use tollgate_core::{Gcra, Nanos};

use crate::keyed::{Geometry, Mode, Table, Upsert, WhenFull};
use crate::policy::store::fingerprint;

/// One nanosecond per permit, burst 1: every small word is long idle (checked when
/// compiled: a const that fails to build is a build error).
const JUDGE: Gcra = match Gcra::from_interval(1, 1) {
    Ok(gcra) => gcra,
    Err(_) => panic!("a 1 ns interval with burst 1 is a valid GCRA"),
};

/// One counter word per client. The table judges words for eviction as an algorithm's
/// state; read as GCRA states (a time), small counts are times long past, so every word
/// is idle and any may be evicted: an evicted count restarts at 0, and that process's next
/// check of the client is charged (never one more free).
#[derive(Debug)]
pub(super) struct Counts {
    geometry: Geometry,
    table: OnceLock<Table<()>>,
    judge: Gcra,
}

impl Counts {
    pub(super) fn new(geometry: Geometry) -> Counts {
        let counts = Counts {
            geometry,
            table: OnceLock::new(),
            judge: JUDGE,
        };
        // Under loom, allocated up front (as the tier stores are): a `OnceLock` racing its
        // initialisation would block a thread loom cannot switch away from.
        #[cfg(tollgate_loom)]
        counts.table();
        counts
    }

    /// The table, allocated on first use.
    fn table(&self) -> &Table<()> {
        self.table.get_or_init(|| {
            let seed = fingerprint("tollgate reward counts mask");
            Table::new(self.geometry, Mode::Fingerprint, WhenFull::Evict, seed)
        })
    }

    /// Advances `client`'s count and says whether this check is charged: one of every
    /// `every` (the first one included).
    pub(super) fn charge_this(&self, client: &str, every: u32, now: Nanos) -> bool {
        if every <= 1 {
            return true;
        }
        let h = fingerprint(client);
        let every = u64::from(every);
        let mut step = |count: u64| (Some((count + 1) % every), count == 0);
        let table = self.table();
        if let Some(charged) = table.update_if_found(h, &mut step) {
            return charged;
        }
        match table.upsert(h, &self.judge, now, || true, || 0, step) {
            Upsert::Done(charged) => charged,
            // The gate always admits; an evicting table always makes room. Charged, if
            // not: never a check more for free.
            Upsert::Closed | Upsert::Full => true,
        }
    }

    pub(super) fn memory_bytes(&self) -> usize {
        self.table.get().map_or(0, Table::memory_bytes)
    }
}
