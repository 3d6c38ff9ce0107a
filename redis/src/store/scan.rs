//! The store's own listing of the clients it keeps state for
//! ([`Store::scan_clients`](tollgate::policy::Store::scan_clients)): `SCAN` of
//! `{prefix}:*`, on every master of a cluster, bounded by the keys examined; each key read
//! back into its rule and client ([`parse_key`]), each per-client pair once. The policy then
//! peeks each pair under the rules in force ([`Policy::limited`](tollgate::policy::Policy::limited)).

use std::collections::HashSet;
use std::future::Future;
use std::pin::pin;

use tollgate::policy::{ScanError, StoreScan, StoredClient};

use super::io::IoRuntime;
use super::RedisStore;
use crate::keys::{match_prefix, parse_key};

/// The most keys one `SCAN` call is asked to examine (its `COUNT`).
const PAGE: usize = 1000;

impl RedisStore {
    /// The pairs this store's keys hold, examining at most `max_keys` keys (about: a
    /// `SCAN` page examines about its `COUNT`), awaited in the store's runtime context.
    pub(crate) async fn scan_io(&self, max_keys: usize) -> Result<StoreScan, ScanError> {
        let Some(runtime) = self.runtime.as_ref() else {
            return Err(ScanError::new("the store's runtime is gone"));
        };
        let handle = runtime.handle().clone();
        let mut scan = pin!(self.scan_calls(max_keys));
        std::future::poll_fn(|cx| {
            // The connection's timers and sockets belong to the store's runtime.
            let _context = handle.enter();
            scan.as_mut().poll(cx)
        })
        .await
    }

    /// [`scan_io`](Self::scan_io), blocking the calling thread.
    pub(crate) fn scan_blocking(&self, max_keys: usize) -> Result<StoreScan, ScanError> {
        let Some(runtime) = self.runtime.as_ref() else {
            return Err(ScanError::new("the store's runtime is gone"));
        };
        let scan = self.scan_io(max_keys);
        match (runtime, tokio::runtime::Handle::try_current()) {
            (IoRuntime::Own(own), Err(_)) => own.block_on(scan),
            (IoRuntime::Given(handle), Err(_)) => handle.block_on(scan),
            (IoRuntime::Own(_) | IoRuntime::Given(_), Ok(current))
                if current.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread =>
            {
                let handle = runtime.handle();
                tokio::task::block_in_place(|| handle.block_on(scan))
            }
            // A current-thread runtime, which refuses to block on another: polled here
            // until done (the store's runtime drives the I/O meanwhile).
            (IoRuntime::Own(_) | IoRuntime::Given(_), Ok(_)) => tollgate::wait::finish(scan),
        }
    }

    /// The `SCAN` calls of [`scan_io`](Self::scan_io), each within the store's timeout.
    async fn scan_calls(&self, max_keys: usize) -> Result<StoreScan, ScanError> {
        let shared = &self.shared;
        let timeout = shared.config.timeout();
        let failed = |e: redis::RedisError| ScanError::new(e.to_string());
        let timed_out = |_| ScanError::new(format!("no answer within {timeout:?}"));
        let masters = tokio::time::timeout(timeout, shared.connection.masters(&shared.counters))
            .await
            .map_err(timed_out)?
            .map_err(failed)?;
        let prefix = shared.config.prefix();
        let pattern = match_prefix(prefix);
        let mut seen = HashSet::new();
        let mut clients = Vec::new();
        // Keys examined (about: a page examines about its `COUNT`), and keys answered
        // (a page may answer more than its `COUNT`): each at most `max_keys`.
        let (mut examined, mut answered) = (0usize, 0usize);
        let mut complete = true;
        'masters: for node in &masters {
            let mut cursor = 0;
            loop {
                if examined >= max_keys {
                    complete = false;
                    break 'masters;
                }
                let count = (max_keys - examined).min(PAGE);
                examined += count;
                let page = shared.connection.scan_page(
                    cursor,
                    &pattern,
                    count,
                    node.as_ref(),
                    &shared.counters,
                );
                let (next, keys) = tokio::time::timeout(timeout, page)
                    .await
                    .map_err(timed_out)?
                    .map_err(failed)?;
                for key in keys {
                    if answered >= max_keys {
                        complete = false;
                        break 'masters;
                    }
                    answered += 1;
                    let Some(parts) = parse_key(prefix, &key) else {
                        continue;
                    };
                    let Some(client) = parts.client else { continue };
                    let pair = StoredClient {
                        rule: parts.rule,
                        client,
                    };
                    if seen.insert(pair.clone()) {
                        clients.push(pair);
                    }
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(StoreScan { clients, complete })
    }
}
