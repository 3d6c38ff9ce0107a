//! [`Connection`]: one lazily established handle to a single server (a reconnecting
//! `ConnectionManager`) or a cluster (`ClusterConnection`), and the `EVALSHA` call with its
//! `NOSCRIPT` reload.

use std::sync::Mutex;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
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
    handle: Mutex<Option<Handle>>,
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
                    .set_response_timeout(Some(config.timeout()))
                    // Reconnect quickly and keep trying: the limiter's own backoff decides
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
                    .response_timeout(config.timeout())
                    .retries(2)
                    .build()
                    .map_err(|e| BuildError::Url(e.to_string()))?;
                Connector::Cluster(client)
            }
        };
        Ok(Connection {
            connector,
            handle: Mutex::new(None),
        })
    }

    async fn handle(&self) -> Result<Handle, RedisError> {
        if let Some(handle) = self.lock().as_ref() {
            return Ok(handle.clone());
        }
        let handle = match &self.connector {
            Connector::Single(client, config) => Handle::Single(
                ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?,
            ),
            Connector::Cluster(client) => Handle::Cluster(client.get_async_connection().await?),
        };
        // Two first checks may both connect; the second one's handle is dropped.
        Ok(self.lock().get_or_insert(handle).clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Handle>> {
        // A poisoned lock only means another thread panicked while cloning a handle; the
        // Option inside is still valid.
        self.handle.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn query(&self, cmd: &Cmd, counters: &Counters) -> Result<Value, RedisError> {
        let mut handle = self.handle().await?;
        Counters::bump(&counters.round_trips);
        match &mut handle {
            Handle::Single(c) => cmd.query_async(c).await,
            Handle::Cluster(c) => cmd.query_async(c).await,
        }
    }

    /// Runs `script` with `keys` and `args`: `EVALSHA`, and on `NOSCRIPT` (a restarted or
    /// failed-over node, `SCRIPT FLUSH`) `EVAL` of the body, which also caches it again.
    pub(crate) async fn eval(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
        counters: &Counters,
    ) -> Result<Value, RedisError> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.sha()).arg(keys.len()).arg(keys).arg(args);
        match self.query(&cmd, counters).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                Counters::bump(&counters.script_reloads);
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(script.body()).arg(keys.len()).arg(keys).arg(args);
                self.query(&cmd, counters).await
            }
            other => other,
        }
    }
}
