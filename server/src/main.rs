//! `tollgate-server`: tollgate's policies as a service — Envoy's Rate Limit Service (v3,
//! gRPC) and an HTTP API — on the rules of Envoy ratelimit's YAML config, in this process
//! or on Redis for a fleet of servers.
//!
//! ```text
//! tollgate-server --config rules.yaml            # gRPC on 127.0.0.1:8081, HTTP on :8080
//! ```
//!
//! SIGHUP (or `POST /v1/reload` on the admin routes) reads the rules again, keeping the
//! old ones if the new do not load; with `--redis … --fleet-rules` the rules follow those
//! published to the fleet instead (`tollgate-server --config FILE --redis URL --publish`); SIGTERM or Ctrl-C stops after the calls in flight
//! (waiting at most `--shutdown-grace` for clients, such as Envoy, that keep their
//! connections open).

mod answer;
mod api;
mod args;
mod config;
mod engine;
mod limiter;
mod rls;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tollgate::policy::Policy;
use tollgate::MonotonicClock;
use tollgate_redis::{
    FleetRules, FleetRulesConfig, LeasedStore, RedisConfig, RedisStore, RedisTarget,
};

use crate::api::Api;
use crate::args::Options;
use crate::config::Domains;
use crate::engine::Engine;
use crate::limiter::Limiter;

fn main() -> std::process::ExitCode {
    let options = match Options::parse(std::env::args_os().skip(1)) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{}", args::USAGE);
            return std::process::ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("{message}");
            return std::process::ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tollgate-server: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let work = async {
        if options.publish {
            publish(&options).await
        } else {
            serve(options).await
        }
    };
    match runtime.block_on(work) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tollgate-server: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `--publish`: the rules at `--config`, checked as a server would load them, published
/// to every server following the fleet's rules on `--redis` (`--fleet-rules`).
async fn publish(options: &Options) -> Result<(), String> {
    let text =
        Domains::published(&options.config).map_err(|e| format!("{e}: nothing published"))?;
    let (target, config) = fleet(options)?;
    let check = |text: &str| {
        let domains = Domains::from_published(text)?;
        // What the servers will compile: refused here rather than by each of them.
        tollgate::policy::PolicyConfig::from_toml(&engine::rules_of(&domains))
            .map(drop)
            .map_err(|e| config::ConfigError::new("the compiled rules", e.to_string()))
    };
    let version = FleetRules::publish_with(&target, &config, &text, check)
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "tollgate-server: published version {version} of {}; every server following it applies it within {:?}",
        options.config.display(),
        config.bound()
    );
    Ok(())
}

/// The fleet's rules' Redis and key prefix (`--redis`, `--redis-prefix`).
fn fleet(options: &Options) -> Result<(RedisTarget, FleetRulesConfig), String> {
    let target = options.redis.clone().ok_or("--redis is required")?;
    let config = FleetRulesConfig::new(&options.redis_prefix)
        .map_err(|e| format!("--redis-prefix {}: {e}", options.redis_prefix))?;
    Ok((target, config))
}

/// Loads the rules, starts every listener, serves until told to stop.
async fn serve(options: Options) -> Result<(), String> {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    let domains = Domains::load(&options.config).map_err(|e| e.to_string())?;
    if domains.is_empty() {
        // A directory of no `*.yaml` / `*.yml`: every call would be answered OK in silence.
        tracing::warn!(
            config = %options.config.display(),
            "no domain loaded: nothing is limited until a reload (or the fleet) brings rules"
        );
    }
    let (enforced, shadow) = limiters(&options, &engine::rules_of(&domains))?;
    let mut engine = Engine::new(options.config.clone(), domains, enforced, shadow);
    if options.fleet_rules {
        engine = engine.following_the_fleet();
    }
    let engine = Arc::new(engine);
    // The fleet's published rules replace the file's once there are any (at the first
    // poll), and each later version as it is published.
    let fleet_rules = if options.fleet_rules {
        let (target, config) = fleet(&options)?;
        let follower = Arc::clone(&engine);
        let rules = FleetRules::follow_with(
            move |text| {
                follower
                    .apply_published(text)
                    .map(|version| format!("the server's rules version {version}"))
            },
            target,
            config,
        )
        .map_err(|e| e.to_string())?;
        Some(Arc::new(rules))
    } else {
        None
    };
    let token: Option<Arc<str>> = std::env::var("TOLLGATE_ADMIN_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .map(Into::into);
    let api = Api {
        engine: Arc::clone(&engine),
        metrics,
        fleet: fleet_rules.clone(),
    };
    let (stop, stopped) = watch::channel(false);
    // Before anything is announced: a stop asked for once the listeners are known is
    // handled, not the signal's default.
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let hangup = signal(SignalKind::hangup()).map_err(|e| e.to_string())?;

    let grpc = TcpListener::bind(options.grpc)
        .await
        .map_err(|e| format!("--grpc {}: {e}", options.grpc))?;
    let http = TcpListener::bind(options.http)
        .await
        .map_err(|e| format!("--http {}: {e}", options.http))?;
    let mut public = api::public(api.clone());
    let admin = match (options.admin, &token) {
        (Some(address), _) => {
            let listener = TcpListener::bind(address)
                .await
                .map_err(|e| format!("--admin {address}: {e}"))?;
            Some(listener)
        }
        (None, Some(_)) => {
            public = public.merge(api::admin(api.clone(), token.clone()));
            None
        }
        (None, None) => {
            tracing::info!("admin routes off: give --admin ADDR, or set TOLLGATE_ADMIN_TOKEN");
            None
        }
    };
    announce("grpc", &grpc)?;
    announce("http", &http)?;
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(listener) = admin {
        announce("admin", &listener)?;
        let router = api::admin(api.clone(), token.clone());
        tasks.spawn(serve_http(listener, router, stopped.clone()));
    }
    tasks.spawn(serve_http(http, public, stopped.clone()));
    tasks.spawn(serve_grpc(
        grpc,
        Arc::clone(&engine),
        options.response_headers,
        stopped.clone(),
    ));
    tasks.spawn(reload_on_hangup(
        Arc::clone(&engine),
        hangup,
        stopped.clone(),
    ));

    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
        Some(done) = tasks.join_next() => {
            // A listener stopped by itself: stop the others, then say why.
            let _ = stop.send(true);
            return match done {
                Ok(Ok(())) => Err("a listener stopped".to_owned()),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(e.to_string()),
            };
        }
    }
    tracing::info!("stopping: finishing the calls in flight");
    let _ = stop.send(true);
    let drained = tokio::time::timeout(options.shutdown_grace, async {
        while let Some(done) = tasks.join_next().await {
            if let Ok(Err(e)) = done {
                tracing::warn!(error = %e, "a listener failed while stopping");
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            grace = ?options.shutdown_grace,
            "connections still open after the shutdown grace: closing them"
        );
        tasks.abort_all();
    }
    Ok(())
}

/// The enforced and the shadow policy of `rules`, on the store `options` name.
fn limiters(options: &Options, rules: &str) -> Result<(Limiter, Limiter), String> {
    let policy = || Policy::from_toml(rules, MonotonicClock::new());
    match &options.redis {
        None => Ok((
            Limiter::InProcess(policy().map_err(|e| e.to_string())?),
            Limiter::InProcess(policy().map_err(|e| e.to_string())?),
        )),
        Some(target) => {
            let config = || {
                RedisConfig::new(&options.redis_prefix)
                    .and_then(|c| c.with_failure_policy(options.redis_failure))
                    .map_err(|e| e.to_string())
            };
            let limiter = || -> Result<Limiter, String> {
                let policy = policy().map_err(|e| e.to_string())?;
                Ok(match &options.leases {
                    None => Limiter::Redis(
                        policy.store(
                            RedisStore::on_runtime(
                                target.clone(),
                                config()?,
                                tokio::runtime::Handle::current(),
                            )
                            .map_err(|e| format!("{target:?}: {e}"))?,
                        ),
                    ),
                    // Its own I/O thread: the leases go back to Redis when the store is
                    // dropped, which may be as this runtime shuts down.
                    Some(leases) => {
                        let redis = RedisStore::new(target.clone(), config()?)
                            .map_err(|e| format!("{target:?}: {e}"))?;
                        let store = LeasedStore::new(redis, leases.clone())
                            .map_err(|e| format!("--leases: {e}"))?;
                        Limiter::Leased(policy.store(store))
                    }
                })
            };
            Ok((limiter()?, limiter()?))
        }
    }
}

/// Prints where `listener` listens, on stdout (what a script or a test waits for).
fn announce(name: &str, listener: &TcpListener) -> Result<(), String> {
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    println!("tollgate-server: {name} listening on {address}");
    tracing::info!(%address, "{name} listening");
    Ok(())
}

/// Serves `router` on `listener` until `stopped` turns true.
async fn serve_http(
    listener: TcpListener,
    router: axum::Router,
    stopped: watch::Receiver<bool>,
) -> Result<(), String> {
    use axum::serve::ListenerExt;
    // TCP_NODELAY, as on the gRPC listener.
    let listener = listener.tap_io(|tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(until_stopped(stopped))
        .await
        .map_err(|e| format!("HTTP listener: {e}"))
}

/// Serves the Rate Limit Service on `listener` until `stopped` turns true.
async fn serve_grpc(
    listener: TcpListener,
    engine: Arc<Engine>,
    headers: bool,
    stopped: watch::Receiver<bool>,
) -> Result<(), String> {
    tonic::transport::Server::builder()
        .add_service(rls::Rls::server(engine, headers))
        .serve_with_incoming_shutdown(
            // TCP_NODELAY: an answer leaves at once, not after the client's delayed ACK
            // (Nagle's algorithm held 64 concurrent streams' answers for ~40 ms).
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            until_stopped(stopped),
        )
        .await
        .map_err(|e| format!("gRPC listener: {e}"))
}

/// Reloads the rules on every SIGHUP (`hangup`) until `stopped` turns true.
async fn reload_on_hangup(
    engine: Arc<Engine>,
    mut hangup: tokio::signal::unix::Signal,
    stopped: watch::Receiver<bool>,
) -> Result<(), String> {
    loop {
        tokio::select! {
            _ = hangup.recv() => {
                // A refused reload is logged by the engine; the old rules stay.
                let _ = engine.reload().await;
            }
            () = until_stopped(stopped.clone()) => return Ok(()),
        }
    }
}

/// Ready when `stopped` turns true (or its sender is gone).
async fn until_stopped(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}
