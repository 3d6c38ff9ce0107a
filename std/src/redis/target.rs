//! [`RedisTarget`]: where the state lives, a single server or a Redis Cluster.

/// The Redis deployment to talk to.
///
/// ```
/// use tollgate::redis::RedisTarget;
/// let single = RedisTarget::Single("redis://127.0.0.1:6379".into());
/// let cluster = RedisTarget::Cluster(vec!["redis://127.0.0.1:7000".into()]);
/// assert_ne!(single, cluster);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RedisTarget {
    /// One server (or a proxy), by URL: `redis://host:port[/db]`.
    Single(String),
    /// A Redis Cluster, by the URLs of some of its nodes (the rest are discovered).
    Cluster(Vec<String>),
}
