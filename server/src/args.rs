//! [`Options`]: the command line.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use tollgate_redis::{FailurePolicy, LeaseConfig, RedisTarget};

/// What the server was asked to do.
#[derive(Debug, PartialEq)]
pub(crate) struct Options {
    /// The rules: an Envoy ratelimit YAML file, or a directory of them.
    pub(crate) config: PathBuf,
    /// Where the gRPC service listens.
    pub(crate) grpc: SocketAddr,
    /// Where the HTTP API listens.
    pub(crate) http: SocketAddr,
    /// Where the admin routes listen, if on a listener of their own.
    pub(crate) admin: Option<SocketAddr>,
    /// The Redis server, or Redis Cluster, whose state the fleet shares (`None`: in this
    /// process).
    pub(crate) redis: Option<RedisTarget>,
    /// The prefix of every Redis key.
    pub(crate) redis_prefix: String,
    /// What a check answers when Redis does not (`--redis-failure`).
    pub(crate) redis_failure: FailurePolicy,
    /// Whether gRPC answers carry the draft-11 `RateLimit` headers for Envoy to add.
    pub(crate) response_headers: bool,
    /// How long a stop waits for open connections (Envoy keeps its own open) before it
    /// closes them.
    pub(crate) shutdown_grace: std::time::Duration,
    /// Whether the rules follow those the fleet published on Redis under the prefix
    /// (`--fleet-rules`; `--config` is then where they start from).
    pub(crate) fleet_rules: bool,
    /// Publish `--config` to the fleet and exit (`--publish`), instead of serving.
    pub(crate) publish: bool,
    /// Serve hot descriptors from leases of their quota (`--leases`, with the lease
    /// settings given), on Redis only.
    pub(crate) leases: Option<LeaseConfig>,
}

/// The usage line.
pub(crate) const USAGE: &str = "usage: tollgate-server --config FILE_OR_DIR \
[--grpc ADDR (127.0.0.1:8081)] [--http ADDR (127.0.0.1:8080)] [--admin ADDR] \
[--redis URL | --redis-cluster URL,URL,...] [--redis-prefix PREFIX (tollgate)] \
[--redis-failure closed|open|fallback=SHARE (closed)] [--fleet-rules] [--leases [--lease-hot-rate N (1000)] [--lease-max N (1000)]] [--response-headers] [--shutdown-grace DURATION (10s)]
       tollgate-server --config FILE_OR_DIR (--redis URL | --redis-cluster URLS) [--redis-prefix PREFIX] --publish
environment: TOLLGATE_ADMIN_TOKEN (admin routes on the HTTP listener, behind this bearer token), \
RUST_LOG (log filter, default info)";

impl Options {
    /// Parses `args` (without the program name): `None` when they ask for the usage
    /// (`--help`, `-h`).
    pub(crate) fn parse(
        args: impl IntoIterator<Item = OsString>,
    ) -> Result<Option<Options>, String> {
        use lexopt::prelude::*;
        let mut parser = lexopt::Parser::from_args(args);
        let mut config = None;
        // The Redis-only flags given, for the check that Redis is.
        let (mut prefixed, mut failure) = (false, false);
        let mut options = Options {
            config: PathBuf::new(),
            grpc: SocketAddr::from(([127, 0, 0, 1], 8081)),
            http: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin: None,
            redis: None,
            redis_prefix: "tollgate".to_owned(),
            redis_failure: FailurePolicy::default(),
            response_headers: false,
            shutdown_grace: std::time::Duration::from_secs(10),
            fleet_rules: false,
            publish: false,
            leases: None,
        };
        while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
            match arg {
                Long("config") => config = Some(PathBuf::from(value(&mut parser)?)),
                Long("grpc") => options.grpc = address(&mut parser, "--grpc")?,
                Long("http") => options.http = address(&mut parser, "--http")?,
                Long("admin") => options.admin = Some(address(&mut parser, "--admin")?),
                Long("redis") => {
                    let url = value(&mut parser)?;
                    redis(&mut options, RedisTarget::Single(url))?;
                }
                Long("redis-cluster") => {
                    let urls = value(&mut parser)?;
                    let nodes: Vec<String> = urls
                        .split(',')
                        .map(str::trim)
                        .filter(|u| !u.is_empty())
                        .map(str::to_owned)
                        .collect();
                    if nodes.is_empty() {
                        return Err(format!("--redis-cluster {urls:?}: no node URL\n{USAGE}"));
                    }
                    redis(&mut options, RedisTarget::Cluster(nodes))?;
                }
                Long("redis-prefix") => {
                    let prefix = value(&mut parser)?;
                    // The store's own check of the name, named by the flag.
                    tollgate_redis::RedisConfig::new(&prefix)
                        .map_err(|e| format!("--redis-prefix {prefix}: {e}"))?;
                    options.redis_prefix = prefix;
                    prefixed = true;
                }
                Long("redis-failure") => {
                    options.redis_failure = failure_policy(&value(&mut parser)?)?;
                    failure = true;
                }
                Long("response-headers") => options.response_headers = true,
                Long("fleet-rules") => options.fleet_rules = true,
                Long("publish") => options.publish = true,
                Long("leases") => {
                    options.leases.get_or_insert_with(LeaseConfig::new);
                }
                Long("lease-hot-rate") => {
                    let rate = number(&mut parser, "--lease-hot-rate")?;
                    let leases = options.leases.take().unwrap_or_default();
                    options.leases = Some(leases.with_hot_rate(rate));
                }
                Long("lease-max") => {
                    let max = number(&mut parser, "--lease-max")?;
                    let max = u32::try_from(max)
                        .map_err(|_| format!("--lease-max {max}: above {}", u32::MAX))?;
                    let leases = options.leases.take().unwrap_or_default();
                    options.leases = Some(leases.with_max_lease(max));
                }
                Long("shutdown-grace") => {
                    let text = value(&mut parser)?;
                    let grace = tollgate::policy::parse_duration(&text)
                        .map_err(|e| format!("--shutdown-grace {text}: {e}"))?;
                    options.shutdown_grace = std::time::Duration::from_nanos(grace.as_u64());
                }
                Long("help") | Short('h') => return Ok(None),
                other => return Err(format!("{}\n{USAGE}", other.unexpected())),
            }
        }
        options.config = config.ok_or_else(|| format!("--config is required\n{USAGE}"))?;
        let redis_only = options.fleet_rules
            || options.publish
            || options.leases.is_some()
            || prefixed
            || failure;
        if redis_only && options.redis.is_none() {
            let flag = if options.publish {
                "--publish"
            } else if options.fleet_rules {
                "--fleet-rules"
            } else if options.leases.is_some() {
                "--leases"
            } else if prefixed {
                "--redis-prefix"
            } else {
                "--redis-failure"
            };
            return Err(format!(
                "{flag} needs --redis or --redis-cluster (the state, the fleet's rules and leases live there)\n{USAGE}"
            ));
        }
        Ok(Some(options))
    }
}

/// The failure policy `text` names (`--redis-failure`): `closed` (deny, `Retry-After` 1 s),
/// `open` (admit) or `fallback=SHARE` (decide in this server with `SHARE` of each limit).
fn failure_policy(text: &str) -> Result<FailurePolicy, String> {
    let policy = match text {
        "closed" => FailurePolicy::default(),
        "open" => FailurePolicy::FailOpen,
        _ => {
            let share = text
                .strip_prefix("fallback=")
                .and_then(|share| share.parse::<f64>().ok())
                .ok_or_else(|| {
                    format!("--redis-failure {text}: write closed, open or fallback=SHARE (e.g. fallback=0.25)")
                })?;
            FailurePolicy::Fallback { share }
        }
    };
    // The store's own check of the policy (a share in (0, 1]), named by the flag.
    tollgate_redis::RedisConfig::default()
        .with_failure_policy(policy)
        .map_err(|e| format!("--redis-failure {text}: {e}"))?;
    Ok(policy)
}

/// The next argument's value, a whole number.
fn number(parser: &mut lexopt::Parser, flag: &str) -> Result<u64, String> {
    let text = value(parser)?;
    text.parse().map_err(|e| format!("{flag} {text}: {e}"))
}

/// Sets the Redis `target`, once.
fn redis(options: &mut Options, target: RedisTarget) -> Result<(), String> {
    if options.redis.is_some() {
        return Err(format!(
            "give one of --redis and --redis-cluster, once\n{USAGE}"
        ));
    }
    options.redis = Some(target);
    Ok(())
}

/// The next argument's value, as UTF-8.
fn value(parser: &mut lexopt::Parser) -> Result<String, String> {
    parser
        .value()
        .map_err(|e| e.to_string())?
        .into_string()
        .map_err(|v| format!("not UTF-8: {v:?}"))
}

/// The next argument's value, as a socket address.
fn address(parser: &mut lexopt::Parser, flag: &str) -> Result<SocketAddr, String> {
    let text = value(parser)?;
    text.parse()
        .map_err(|e| format!("{flag} {text}: {e} (write it as IP:PORT, e.g. 0.0.0.0:8081)"))
}

#[cfg(test)]
mod tests {
    use super::Options;
    use tollgate_redis::{FailurePolicy, RedisTarget};

    fn parse(args: &[&str]) -> Result<Options, String> {
        Options::parse(args.iter().map(Into::into)).map(|options| options.expect("not --help"))
    }

    #[test]
    fn every_flag_is_read_and_mistakes_are_named() {
        let options = parse(&[
            "--config",
            "rules.yaml",
            "--grpc",
            "0.0.0.0:9001",
            "--http",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:9003",
            "--redis",
            "redis://r:6379",
            "--redis-prefix",
            "rl",
            "--response-headers",
            "--shutdown-grace",
            "1.5s",
            "--fleet-rules",
        ])
        .unwrap();
        assert!(options.fleet_rules && !options.publish);
        assert_eq!(options.config.to_str(), Some("rules.yaml"));
        assert_eq!(options.grpc.to_string(), "0.0.0.0:9001");
        assert_eq!(options.http.port(), 0);
        assert_eq!(options.admin.map(|a| a.port()), Some(9003));
        assert_eq!(
            options.redis,
            Some(RedisTarget::Single("redis://r:6379".into()))
        );
        assert_eq!(options.redis_prefix, "rl");
        assert!(options.response_headers);
        assert_eq!(options.shutdown_grace.as_millis(), 1500);

        let defaults = parse(&["--config", "r.yaml"]).unwrap();
        assert_eq!(
            (
                defaults.grpc.to_string(),
                defaults.http.to_string(),
                defaults.admin
            ),
            (
                "127.0.0.1:8081".to_owned(),
                "127.0.0.1:8080".to_owned(),
                None
            )
        );
        assert!(parse(&[]).unwrap_err().starts_with("--config is required"));
        assert!(parse(&["--config", "r", "--grpc", "8081"])
            .unwrap_err()
            .starts_with("--grpc 8081: invalid socket address syntax"));
        assert!(parse(&["--config", "r", "--shutdown-grace", "soon"])
            .unwrap_err()
            .starts_with("--shutdown-grace soon: "));
        // The fleet's rules and the leases live on Redis.
        let leased = parse(&["--config", "r", "--redis", "redis://r", "--lease-max", "50"]);
        let leases = leased.unwrap().leases.unwrap();
        assert_eq!((leases.max_lease(), leases.hot_rate()), (50, 1000));
        let leased = parse(&["--config", "r", "--redis", "redis://r", "--leases"]);
        assert_eq!(leased.unwrap().leases.unwrap().max_lease(), 1000);
        assert!(
            parse(&["--config", "r", "--redis", "r", "--lease-max", "-1"])
                .unwrap_err()
                .starts_with("--lease-max -1: invalid digit")
        );
        assert!(parse(&["--config", "r", "--redis-prefix", "rl"])
            .unwrap_err()
            .starts_with("--redis-prefix needs --redis"));
        assert!(parse(&[
            "--config",
            "r",
            "--redis",
            "redis://r",
            "--redis-prefix",
            "{x}"
        ])
        .unwrap_err()
        .starts_with("--redis-prefix {x}: "));
        // What a check answers while Redis does not: fail closed unless told otherwise.
        let failure = |mode: &str| {
            parse(&[
                "--config",
                "r",
                "--redis",
                "redis://r",
                "--redis-failure",
                mode,
            ])
            .map(|options| options.redis_failure)
        };
        assert_eq!(
            parse(&["--config", "r", "--redis", "redis://r"])
                .unwrap()
                .redis_failure,
            FailurePolicy::default()
        );
        assert_eq!(failure("closed"), Ok(FailurePolicy::default()));
        assert_eq!(failure("open"), Ok(FailurePolicy::FailOpen));
        assert_eq!(
            failure("fallback=0.25"),
            Ok(FailurePolicy::Fallback { share: 0.25 })
        );
        for bad in ["fallback=0", "fallback=1.5", "fallback=NaN"] {
            assert!(
                failure(bad)
                    .unwrap_err()
                    .starts_with(&format!("--redis-failure {bad}: ")),
                "{bad}"
            );
        }
        assert!(failure("shut")
            .unwrap_err()
            .starts_with("--redis-failure shut: write closed, open or fallback=SHARE"));
        assert!(parse(&["--config", "r", "--redis-failure", "open"])
            .unwrap_err()
            .starts_with("--redis-failure needs --redis"));
        for flag in ["--fleet-rules", "--publish", "--leases"] {
            assert!(parse(&["--config", "r", flag])
                .unwrap_err()
                .starts_with(&format!("{flag} needs --redis")));
        }
        let cluster = parse(&[
            "--config",
            "r",
            "--redis-cluster",
            "redis://a:1, redis://b:2",
        ]);
        assert_eq!(
            cluster.unwrap().redis,
            Some(RedisTarget::Cluster(vec![
                "redis://a:1".into(),
                "redis://b:2".into()
            ]))
        );
        assert!(parse(&["--config", "r", "--redis-cluster", ","])
            .unwrap_err()
            .contains("no node URL"));
        assert!(parse(&[
            "--config",
            "r",
            "--redis",
            "redis://a",
            "--redis-cluster",
            "redis://b"
        ])
        .unwrap_err()
        .starts_with("give one of"));
        let publish = parse(&["--config", "r", "--redis", "redis://r", "--publish"]).unwrap();
        assert!(publish.publish);
        assert!(parse(&["--config", "r", "--bogus"])
            .unwrap_err()
            .starts_with("invalid option '--bogus'"));
    }
}
