//! What the layer logs, read back through a `tracing` subscriber over a real axum server on
//! loopback: a refusal names the rules file's entry, never a client key; denials and bad
//! keys at `debug`; route-template rules a layer cannot match, at `warn`. Its own test
//! binary, so that no other test's events race the subscriber's registration.

mod http_support;

use std::sync::Arc;

use http_support::lists::{app, RULES};
use http_support::{api_key, send, serve, BoxError};
use tollgate::policy::Policy;
use tollgate::ManualClock;
use tollgate_http::{ClientKey, RateLimitLayer, Settle};

/// What a test's subscriber writes, kept.
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut kept) = self.0.lock() {
            kept.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Keeps what this thread logs at `level` and above until the guard drops (a test's
    /// runtime is one thread: the server's tasks log through it too).
    fn capture(level: tracing::Level) -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// The `debug` lines of `text` that hold `message`.
    fn debug_lines(text: &str, message: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.contains("DEBUG") && l.contains(message))
            .map(str::to_owned)
            .collect()
    }

    /// What was written so far.
    fn text(&self) -> String {
        self.0
            .lock()
            .map(|kept| String::from_utf8_lossy(&kept).into_owned())
            .unwrap_or_default()
    }
}

/// A refusal is logged by the entry's place in the rules file, its kind and reason; the
/// client key a deny entry names is never written (nor the key of the request).
#[tokio::test]
async fn refusals_are_logged_without_the_client_key() -> Result<(), BoxError> {
    let (logs, _default) = Logs::capture(tracing::Level::DEBUG);
    let policy = Arc::new(Policy::from_toml(RULES, ManualClock::new())?);
    let layer = RateLimitLayer::new(policy).key(ClientKey::header("x-api-key")?);
    let addr = serve(app(layer)).await?;
    assert_eq!(send(addr, "/", &api_key("acct_666")).await?.status, 403);
    assert_eq!(
        send(addr, "/v0/users", &api_key("acct_7")).await?.status,
        403
    );
    let text = logs.text();
    let refusals: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("request refused"))
        .collect();
    assert_eq!(refusals.len(), 2, "{text}");
    assert!(
        refusals[0].contains(r#"kind="deny" entry="deny[0]""#),
        "{text}"
    );
    assert!(
        refusals[1].contains(r#"kind="ban" entry="rules[2]""#),
        "{text}"
    );
    assert!(refusals[1].contains("/v0 was retired"), "{text}");
    assert!(
        !text.contains("acct_666") && !text.contains("acct_7"),
        "{text}"
    );
    Ok(())
}

/// A deny is one `debug` event naming the endpoint, the denying rule and tier and the retry
/// time; a request without a usable key one naming what was wrong with it. Neither writes
/// the client key.
#[tokio::test]
async fn denials_and_bad_keys_are_logged_at_debug() -> Result<(), BoxError> {
    let (logs, _default) = Logs::capture(tracing::Level::DEBUG);
    let policy = Arc::new(Policy::from_toml(RULES, ManualClock::new())?);
    let layer = RateLimitLayer::new(policy).key(ClientKey::header("x-api-key")?);
    let addr = serve(app(layer)).await?;
    assert_eq!(send(addr, "/", &api_key("acct_1")).await?.status, 200);
    assert_eq!(send(addr, "/", &api_key("acct_1")).await?.status, 429);
    assert_eq!(send(addr, "/", &[]).await?.status, 400);
    let text = logs.text();
    let denials = Logs::debug_lines(&text, "request denied");
    assert_eq!(denials.len(), 1, "{text}");
    assert!(
        denials[0].contains(r#"endpoint="/""#)
            && denials[0].contains("default")
            && denials[0].contains("retry_after_ms=60000"),
        "{text}"
    );
    let bad_keys = Logs::debug_lines(&text, "no usable client key");
    assert_eq!(bad_keys.len(), 1, "{text}");
    assert!(
        bad_keys[0].contains("missing client key: key header"),
        "{text}"
    );
    assert!(!text.contains("acct_1"), "{text}");
    Ok(())
}

/// A request costing more than the limits can ever admit is one `debug` event naming the
/// endpoint, its cost and the most the limits admit (it was counted, and logged nowhere).
#[tokio::test]
async fn requests_costing_more_than_any_limit_are_logged_at_debug() -> Result<(), BoxError> {
    let (logs, _default) = Logs::capture(tracing::Level::DEBUG);
    let policy = Arc::new(Policy::from_toml(RULES, ManualClock::new())?);
    let layer = RateLimitLayer::new(policy)
        .key(ClientKey::header("x-api-key")?)
        .cost(|_| 5);
    let addr = serve(app(layer)).await?;
    assert_eq!(send(addr, "/", &api_key("acct_1")).await?.status, 413);
    let text = logs.text();
    let events = Logs::debug_lines(&text, "costs more than the limits can admit");
    assert_eq!(events.len(), 1, "{text}");
    assert!(
        events[0].contains(r#"endpoint="/""#)
            && events[0].contains("cost=5")
            && events[0].contains("max_cost=1"),
        "{text}"
    );
    assert!(!text.contains("acct_1"), "{text}");
    Ok(())
}

/// A response whose actual-cost header cannot be read is one `debug` event naming the
/// header (the estimate stands; it was counted, and logged nowhere).
#[tokio::test]
async fn unreadable_actual_costs_are_logged_at_debug() -> Result<(), BoxError> {
    let (logs, _default) = Logs::capture(tracing::Level::DEBUG);
    let policy = Arc::new(Policy::from_toml(RULES, ManualClock::new())?);
    let layer = RateLimitLayer::new(policy)
        .key(ClientKey::header("x-api-key")?)
        .settle(Settle::from_header("x-tokens-used")?);
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::get(|| async { ([("x-tokens-used", "lots")], "ok") }),
        )
        .layer(layer.clone());
    let addr = serve(app).await?;
    assert_eq!(send(addr, "/", &api_key("acct_1")).await?.status, 200);
    assert_eq!(layer.stats().unreadable_costs, 1);
    let text = logs.text();
    let events = Logs::debug_lines(&text, "actual cost not a decimal u32");
    assert_eq!(events.len(), 1, "{text}");
    assert!(events[0].contains(r#"header="x-tokens-used""#), "{text}");
    assert!(!text.contains("acct_1"), "{text}");
    Ok(())
}

/// Runs `scenario` on a thread of its own, with its own runtime and subscriber (the layer
/// samples the requests it names by raw path by a count of each thread's own, so each
/// scenario starts at its thread's first); how many warnings about route templates it
/// logged.
fn template_warnings<F, Fut>(scenario: F) -> Result<usize, BoxError>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), BoxError>>,
{
    std::thread::spawn(move || -> Result<usize, BoxError> {
        let (logs, _default) = Logs::capture(tracing::Level::WARN);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(scenario())?;
        Ok(logs.text().matches("route template").count())
    })
    .join()
    .map_err(|_| "the scenario panicked")?
}

const TEMPLATES: &str =
    "[[rules]]\nname = \"users\"\nendpoint = \"/users/{id}\"\nlimit = 5\nwindow = \"1m\"\n";

fn policy(rules: &str) -> Result<Arc<Policy<ManualClock>>, BoxError> {
    Ok(Arc::new(Policy::from_toml(rules, ManualClock::new())?))
}

/// `GET /users/42` through `layer` in process, as a plain hyper service gets it (a peer
/// address, no `MatchedPath`).
async fn call_unrouted(layer: &RateLimitLayer) -> Result<(), BoxError> {
    use tower::ServiceExt;
    let mut request = http_support::from_peer([192, 0, 2, 1]);
    *request.uri_mut() = http::Uri::from_static("/users/42");
    http_support::in_process(layer).oneshot(request).await?;
    Ok(())
}

/// Rules that select by route template on a layer that names requests by their raw path
/// (outside a router: here called in process, as a plain hyper service is, with no
/// `MatchedPath`) can never match: one `warn` says so and names the fix, at most once a
/// minute, awaited layers too. Inside a router, once a request has matched a route, an
/// unmatched request's raw path is no such sign; rules without a template never warn.
#[test]
fn template_rules_a_layer_cannot_match_are_warned_about() -> Result<(), BoxError> {
    use axum::routing::get;
    // Outside a router: warned once in one more request than the layer's sample of 4 096,
    // whose last is sampled again (the once-a-minute limit keeps it quiet).
    let outside = template_warnings(|| async {
        let layer = RateLimitLayer::new(policy(TEMPLATES)?);
        for _ in 0..=4_096 {
            call_unrouted(&layer).await?;
        }
        Ok(())
    })?;
    assert_eq!(outside, 1);
    // An awaited layer (a policy whose checks are awaited, as on Redis) alike.
    let awaited = template_warnings(|| async {
        call_unrouted(&RateLimitLayer::awaited(policy(TEMPLATES)?)).await
    })?;
    assert_eq!(awaited, 1);
    // Rules by prefix match raw paths: nothing to warn about.
    let by_prefix = template_warnings(|| async {
        let plain =
            "[[rules]]\nname = \"users\"\nendpoint = \"/users/*\"\nlimit = 5\nwindow = \"1m\"\n";
        call_unrouted(&RateLimitLayer::new(policy(plain)?)).await
    })?;
    assert_eq!(by_prefix, 0);
    // Inside a router: a matched route first, then an unmatched request.
    let router = |layer: RateLimitLayer| {
        axum::Router::new()
            .route("/users/{id}", get(|| async { "user" }))
            .layer(layer)
    };
    let routed = template_warnings(move || async move {
        let addr = serve(router(RateLimitLayer::new(policy(TEMPLATES)?))).await?;
        assert_eq!(send(addr, "/users/42", &[]).await?.status, 200);
        assert_eq!(send(addr, "/nowhere", &[]).await?.status, 404);
        Ok(())
    })?;
    assert_eq!(
        routed, 0,
        "a router's unmatched request is not a wiring error"
    );
    // A router whose first request matches no route cannot tell yet: it says so.
    let unmatched_first = template_warnings(move || async move {
        let addr = serve(router(RateLimitLayer::new(policy(TEMPLATES)?))).await?;
        assert_eq!(send(addr, "/nowhere", &[]).await?.status, 404);
        Ok(())
    })?;
    assert_eq!(unmatched_first, 1);
    Ok(())
}
