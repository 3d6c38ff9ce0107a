//! [`Connection`]: one lazily established handle to a single server (a reconnecting
//! `ConnectionManager`) or a cluster (`ClusterConnection`), and the script call: `FCALL` of
//! the script's function library, loaded (`FUNCTION LOAD REPLACE`) on the server that
//! answers `Function not found`; `EVALSHA` with its `NOSCRIPT` reload on servers without
//! Redis Functions (before 7.0).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Client, Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

use super::stats::Counters;
use super::{BuildError, LuaScript, RedisConfig, RedisTarget};

/// A connected handle; both kinds are cheap clones sharing one multiplexed connection.
#[derive(Clone)]
enum Handle {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// How to (re)connect.
enum Connector {
    Single(Client, ConnectionManagerConfig),
    Cluster(ClusterClient),
}

/// The backend connection: built without touching the network, connected on first use
/// (inside the caller's tokio runtime), kept across failures (both handles reconnect by
/// themselves).
pub(crate) struct Connection {
    connector: Connector,
    /// Set by the first check that connects, then never replaced (both kinds reconnect
    /// by themselves).
    handle: OnceLock<Handle>,
    /// Set once a server answered that it has no `FCALL` / `FUNCTION` (Redis 6): this
    /// connection then runs scripts by `EVALSHA` / `EVAL` for good.
    eval_only: AtomicBool,
}

/// The server has no such command (Redis before 7.0 for `FCALL` and `FUNCTION`).
fn is_unknown_command(e: &RedisError) -> bool {
    e.code() == Some("ERR") && e.detail().is_some_and(|d| d.starts_with("unknown command"))
}

/// `FCALL` of a function the server does not have (never loaded there, `FUNCTION FLUSH`, a
/// restart without persistence, a failover to a replica that never saw the load).
fn is_function_not_found(e: &RedisError) -> bool {
    e.code() == Some("ERR")
        && e.detail()
            .is_some_and(|d| d.starts_with("Function not found"))
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.connector {
            Connector::Single(..) => "Connection::Single",
            Connector::Cluster(..) => "Connection::Cluster",
        })
    }
}

impl Connection {
    pub(crate) fn new(
        target: &RedisTarget,
        config: &RedisConfig,
    ) -> Result<Connection, BuildError> {
        let connector = match target {
            RedisTarget::Single(url) => {
                let client =
                    Client::open(url.as_str()).map_err(|e| BuildError::Url(e.to_string()))?;
                let manager = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(config.connect_timeout()))
                    // None: the store bounds each whole call (a reply, a reload of the
                    // library, a wait for a reconnect) by the same timeout itself, and a
                    // timed-out reply does not make the manager reconnect either way, so a
                    // second timer per request would only cost time.
                    .set_response_timeout(None)
                    // Reconnect quickly and keep trying: the store's own backoff decides
                    // how often a check waits for Redis.
                    .set_min_delay(std::time::Duration::from_millis(10))
                    .set_max_delay(
                        config
                            .retry_backoff()
                            .max(std::time::Duration::from_millis(10)),
                    )
                    .set_number_of_retries(2);
                Connector::Single(client, manager)
            }
            RedisTarget::Cluster(urls) => {
                let client = ClusterClient::builder(urls.iter().map(String::as_str))
                    .connection_timeout(config.connect_timeout())
                    // Long: the store bounds each call by its own timeout. A shorter one
                    // would only drop the answer to a call that ran late and must be
                    // settled (a lease's, see `RedisStore::lease_op`), or make the client
                    // send the call again to a node that has it queued.
                    .response_timeout(super::store::SETTLE.max(config.timeout()))
                    .retries(2)
                    // A `TRYAGAIN` (a multi-key call while its slot's keys are being
                    // moved) or `CLUSTERDOWN` is retried after this wait: by default at
                    // least 1.28 s, five times the default timeout, so a migration a few
                    // ms long failed the call. Short, and within the timeout.
                    .min_retry_wait(10)
                    .max_retry_wait(
                        u64::try_from(config.timeout().as_millis() / 4)
                            .unwrap_or(u64::MAX)
                            .max(11),
                    )
                    .build()
                    .map_err(|e| BuildError::Url(e.to_string()))?;
                Connector::Cluster(client)
            }
        };
        Ok(Connection {
            connector,
            handle: OnceLock::new(),
            eval_only: AtomicBool::new(!config.functions()),
        })
    }

    async fn handle(&self) -> Result<Handle, RedisError> {
        if let Some(handle) = self.handle.get() {
            return Ok(handle.clone());
        }
        let handle = match &self.connector {
            Connector::Single(client, config) => Handle::Single(
                ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?,
            ),
            Connector::Cluster(client) => Handle::Cluster(client.get_async_connection().await?),
        };
        // Two first checks may both connect; the second one's handle is dropped.
        Ok(self.handle.get_or_init(|| handle).clone())
    }

    async fn query(&self, cmd: &Cmd, counters: &Counters) -> Result<Value, RedisError> {
        let mut handle = self.handle().await?;
        counters.round_trips.add(1);
        match &mut handle {
            Handle::Single(c) => cmd.query_async(c).await,
            Handle::Cluster(c) => cmd.query_async(c).await,
        }
    }

    /// Sends `cmd` to the master of `key`'s slot in a cluster; to the one server otherwise.
    async fn query_at(
        &self,
        cmd: &Cmd,
        key: Option<&str>,
        counters: &Counters,
    ) -> Result<Value, RedisError> {
        counters.round_trips.add(1);
        self.route(cmd, key).await
    }

    /// The server's `TIME` (Unix µs): of the master of `key`'s slot in a cluster, of the
    /// one server otherwise. Counted in `clock_syncs`, not `round_trips`.
    pub(crate) async fn server_time(
        &self,
        key: Option<&str>,
        counters: &Counters,
    ) -> Result<u64, RedisError> {
        counters.clock_syncs.add(1);
        let reply = self.route(&redis::cmd("TIME"), key).await?;
        let field = |v: Option<&Value>| -> Option<u64> {
            match v? {
                Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
                Value::SimpleString(s) => s.parse().ok(),
                Value::Int(i) => u64::try_from(*i).ok(),
                _ => None,
            }
        };
        let time = match &reply {
            Value::Array(parts) if parts.len() == 2 => field(parts.first())
                .zip(field(parts.get(1)))
                .and_then(|(s, us)| s.checked_mul(1_000_000)?.checked_add(us)),
            _ => None,
        };
        time.ok_or_else(|| {
            RedisError::from((
                ErrorKind::Parse,
                "TIME answered with something else",
                format!("{reply:?}"),
            ))
        })
    }

    /// [`query_at`](Self::query_at), uncounted.
    async fn route(&self, cmd: &Cmd, key: Option<&str>) -> Result<Value, RedisError> {
        let mut handle = self.handle().await?;
        match (&mut handle, key) {
            (Handle::Cluster(c), Some(key)) => {
                let node =
                    SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
                c.route_command(cmd.clone(), RoutingInfo::SingleNode(node))
                    .await
            }
            (Handle::Single(c), _) => cmd.query_async(c).await,
            (Handle::Cluster(c), None) => cmd.query_async(c).await,
        }
    }

    /// One `SCAN` page from `cursor` of the keys matching `pattern` (about `count` keys
    /// examined): the next cursor (0: done) and the keys. On a cluster, of the master at
    /// `node` (see [`masters`](Self::masters)); of the one server otherwise.
    pub(crate) async fn scan_page(
        &self,
        cursor: u64,
        pattern: &str,
        count: usize,
        node: Option<&(String, u16)>,
        counters: &Counters,
    ) -> Result<(u64, Vec<String>), RedisError> {
        counters.round_trips.add(1);
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count);
        let mut handle = self.handle().await?;
        let reply = match (&mut handle, node) {
            // By address, not by slot: the client's slot map may be older than the
            // `CLUSTER SLOTS` the masters were read from (a resharding it has not been
            // redirected by), and would send the page to another master.
            (Handle::Cluster(c), Some((host, port))) => {
                let node = SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                };
                c.route_command(cmd, RoutingInfo::SingleNode(node)).await?
            }
            (Handle::Single(c), _) => cmd.query_async(c).await?,
            (Handle::Cluster(c), None) => cmd.query_async(c).await?,
        };
        Ok(redis::from_redis_value(reply)?)
    }

    /// The address of each master of the cluster (`CLUSTER SLOTS`), in the order of their
    /// first slots; `[None]` for a single server.
    pub(crate) async fn masters(
        &self,
        counters: &Counters,
    ) -> Result<Vec<Option<(String, u16)>>, RedisError> {
        let mut handle = self.handle().await?;
        let Handle::Cluster(c) = &mut handle else {
            return Ok(vec![None]);
        };
        counters.round_trips.add(1);
        let reply = c
            .route_command(
                redis::cmd("CLUSTER").arg("SLOTS").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await?;
        let ranges: Vec<(u16, u16, (String, u16))> = match reply {
            Value::Array(ranges) => ranges
                .into_iter()
                .filter_map(|range| match range {
                    // start, end, master (host, port, …), replicas…
                    Value::Array(parts) if parts.len() >= 3 => {
                        let mut parts = parts.into_iter();
                        let start = redis::from_redis_value(parts.next()?).ok()?;
                        let end = redis::from_redis_value(parts.next()?).ok()?;
                        let master = match parts.next()? {
                            Value::Array(node) if node.len() >= 2 => {
                                let mut node = node.into_iter();
                                let host: String = redis::from_redis_value(node.next()?).ok()?;
                                let port: u16 = redis::from_redis_value(node.next()?).ok()?;
                                (host, port)
                            }
                            _ => return None,
                        };
                        Some((start, end, master))
                    }
                    _ => None,
                })
                .collect(),
            other => {
                return Err(RedisError::from((
                    ErrorKind::Parse,
                    "CLUSTER SLOTS answered with something else",
                    format!("{other:?}"),
                )))
            }
        };
        let mut sorted = ranges;
        sorted.sort_by_key(|(start, _, _)| *start);
        let mut masters = Vec::new();
        for (_start, _end, master) in sorted {
            let master = Some(master);
            if !masters.contains(&master) {
                masters.push(master);
            }
        }
        Ok(masters)
    }

    /// Runs `script` with `keys` and `args` (all in one slot): `FCALL` of its function; on
    /// `Function not found` the library is loaded on that server (`FUNCTION LOAD REPLACE`,
    /// counted in `script_reloads`) and the call retried once; if it is still not found
    /// (a cluster's `ASK` sent it on to the master the slot is moving to), by
    /// [`eval_sha`](Self::eval_sha) this once. A server without Redis
    /// Functions (`unknown command`) switches this connection to [`eval`](Self::eval_sha)
    /// for good.
    pub(crate) async fn eval(
        &self,
        script: &LuaScript,
        keys: &[&str],
        args: &[&str],
        counters: &Counters,
    ) -> Result<Value, RedisError> {
        // Relaxed: a hint; a racing call that still tries FCALL just gets the same answer.
        if !self.eval_only.load(Ordering::Relaxed) {
            let mut fcall = redis::cmd("FCALL");
            fcall
                .arg(script.function_name())
                .arg(keys.len())
                .arg(keys)
                .arg(args);
            match self.query(&fcall, counters).await {
                Err(e) if is_function_not_found(&e) => {
                    counters.script_reloads.add(1);
                    let mut load = redis::cmd("FUNCTION");
                    load.arg("LOAD").arg("REPLACE").arg(script.library());
                    match self.query_at(&load, keys.first().copied(), counters).await {
                        Ok(_) => match self.query(&fcall, counters).await {
                            // Still not found: the call went on to a node the load did not
                            // reach (an `ASK` redirect to the master a slot is moving to,
                            // which only the call follows). The script's body runs
                            // wherever the call is sent.
                            Err(e) if is_function_not_found(&e) => {}
                            other => return other,
                        },
                        Err(e) if is_unknown_command(&e) => {
                            self.eval_only.store(true, Ordering::Relaxed)
                        }
                        Err(e) => return Err(e),
                    }
                }
                Err(e) if is_unknown_command(&e) => self.eval_only.store(true, Ordering::Relaxed),
                other => return other,
            }
        }
        self.eval_sha(script, keys, args, counters).await
    }

    /// Runs `script` with `keys` and `args`: `EVALSHA`, and on `NOSCRIPT` (a restarted or
    /// failed-over node, `SCRIPT FLUSH`) `EVAL` of the body, which also caches it again.
    pub(crate) async fn eval_sha(
        &self,
        script: &LuaScript,
        keys: &[&str],
        args: &[&str],
        counters: &Counters,
    ) -> Result<Value, RedisError> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.sha()).arg(keys.len()).arg(keys).arg(args);
        match self.query(&cmd, counters).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                counters.script_reloads.add(1);
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(script.body()).arg(keys.len()).arg(keys).arg(args);
                self.query(&cmd, counters).await
            }
            other => other,
        }
    }
}

/// The one-thread tokio runtime that drives a blocking front end's Redis I/O.
pub(crate) fn io_runtime(thread_name: &str) -> Result<tokio::runtime::Runtime, BuildError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(thread_name)
        .enable_all()
        .build()
        .map_err(|e| BuildError::Runtime(e.to_string()))
}
