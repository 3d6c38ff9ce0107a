//! The fleet rules' few Redis calls: a [`Link`] to one server or a cluster, the
//! announcements' subscription, every call bounded by a timeout.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::{MultiplexedConnection, PubSubStream};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, FromRedisValue, RedisError};

use super::FleetRulesError;
use crate::RedisTarget;

/// A connection for the fleet rules' few calls: one server or a cluster.
pub(super) enum Link {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Link {
    /// Connects to `target`, within `timeout`.
    pub(super) async fn connect(
        target: &RedisTarget,
        timeout: Duration,
    ) -> Result<Link, FleetRulesError> {
        bounded(timeout, async {
            match target {
                RedisTarget::Single(url) => {
                    let config = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(Some(timeout));
                    let client = Client::open(url.as_str())?;
                    Ok(Link::Single(
                        client
                            .get_multiplexed_async_connection_with_config(&config)
                            .await?,
                    ))
                }
                RedisTarget::Cluster(urls) => {
                    let client = ClusterClient::builder(urls.iter().map(String::as_str))
                        .connection_timeout(timeout)
                        .response_timeout(timeout)
                        .build()?;
                    Ok(Link::Cluster(client.get_async_connection().await?))
                }
            }
        })
        .await
    }

    /// Runs `cmd`, within `timeout`.
    pub(super) async fn query<T: FromRedisValue>(
        &mut self,
        cmd: &Cmd,
        timeout: Duration,
    ) -> Result<T, FleetRulesError> {
        bounded(timeout, async {
            match self {
                Link::Single(c) => cmd.query_async(c).await,
                Link::Cluster(c) => cmd.query_async(c).await,
            }
        })
        .await
    }
}

/// Subscribes to `channel` on `target` within `timeout`: the server, or a node of a
/// cluster (a publish reaches every node), the `attempt`-th in turn, so that a node down
/// does not stop the follower from subscribing on another.
pub(super) async fn subscribe(
    target: &RedisTarget,
    channel: &str,
    timeout: Duration,
    attempt: usize,
) -> Result<PubSubStream, FleetRulesError> {
    let url = match target {
        RedisTarget::Single(url) => url.as_str(),
        RedisTarget::Cluster(urls) => urls
            .get(attempt % urls.len().max(1))
            .map(String::as_str)
            .ok_or_else(|| FleetRulesError::Redis("a cluster without nodes".into()))?,
    };
    bounded(timeout, async {
        let mut pubsub = Client::open(url)?.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok(pubsub.into_on_message())
    })
    .await
}

/// `work`, failed if it takes longer than `timeout`.
pub(super) async fn bounded<T>(
    timeout: Duration,
    work: impl std::future::Future<Output = Result<T, RedisError>>,
) -> Result<T, FleetRulesError> {
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result.map_err(FleetRulesError::from),
        Err(_) => Err(FleetRulesError::Redis(format!(
            "no answer within {timeout:?}"
        ))),
    }
}

/// Milliseconds since the Unix epoch.
pub(super) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
