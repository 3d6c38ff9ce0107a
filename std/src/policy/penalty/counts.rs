//! [`Counts`]: a count per client and endpoint in a bounded, lock-free keyed table (the
//! tier stores' kind), allocated at the first write: what a rewarded client's checks are
//! charged in this process.

use std::sync::OnceLock;

use tollgate_core::{Gcra, Nanos};

use crate::keyed::{Geometry, Mode, Table, Upsert, WhenFull};
use crate::policy::store::fingerprint;
use crate::policy::Request;

/// One nanosecond per permit, burst 1: every small word is long idle (checked when
/// compiled: a const that fails to build is a build error).
const JUDGE: Gcra = match Gcra::from_interval(1, 1) {
    Ok(gcra) => gcra,
    Err(_) => panic!("a 1 ns interval with burst 1 is a valid GCRA"),
};

/// One count word per client and endpoint. The table judges words for eviction as an
/// algorithm's state; read as GCRA states (a time), small counts are times long past, so
/// every word is idle and any may be evicted: an evicted count restarts at 0, and that
/// process's next check of the pair is charged (never one more free).
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

    /// The permits a check of `request` by a client whose limits are multiplied by
    /// `every` is charged: the multiples of `every` its cost crosses in the count kept for
    /// the client and endpoint (counting from the first permit: `ceil((count + cost) /
    /// every) − ceil(count / every)`), the count kept modulo `every`. 0: decided as a
    /// peek, free.
    pub(super) fn charge(&self, request: &Request<'_>, every: u32, now: Nanos) -> u32 {
        if every <= 1 {
            return request.cost;
        }
        let h = fingerprint(request.client).rotate_left(29) ^ fingerprint(request.endpoint);
        let every = u64::from(every);
        let cost = u64::from(request.cost);
        let mut step = |count: u64| {
            let count = count % every;
            let total = count + cost;
            let charged = total.div_ceil(every) - u64::from(count > 0);
            (Some(total % every), charged)
        };
        let table = self.table();
        let charged = match table.update_if_found(h, &mut step) {
            Some(charged) => charged,
            None => match table.upsert(h, &self.judge, now, || true, || 0, step) {
                Upsert::Done(charged) => charged,
                // The gate always admits; an evicting table always makes room. Charged in
                // full, if not: never a check more for free.
                Upsert::Closed | Upsert::Full => cost,
            },
        };
        // At most the cost, a u32.
        u32::try_from(charged).unwrap_or(request.cost)
    }

    pub(super) fn memory_bytes(&self) -> usize {
        self.table.get().map_or(0, Table::memory_bytes)
    }
}
