//! The layer's metrics as an operator scrapes them: a real axum server with a Prometheus
//! recorder (metrics-exporter-prometheus) serving `/metrics`, a known sequence of
//! requests from a real hyper client and two reloads, then a scrape over HTTP, asserting
//! every counter (a shadow rule's and the policy's reload counters included).

mod http_support;

use std::sync::Arc;

use axum::routing::{get, options};
use axum::Router;
use http::Method;
use metrics_exporter_prometheus::PrometheusBuilder;
use tollgate::policy::Policy;
use tollgate::{ManualClock, Nanos};
use tollgate_http::{ClientKey, RateLimitLayer};

use http_support::{send, send_method, serve, BoxError};

const RULES: &str = r#"
    [[rules]]
    name = "api"
    limit = 2
    window = "1m"
    algorithm = "fixed_window"

    [[rules]]
    name = "search"
    endpoint = "/search"
    limit = 1
    window = "1m"
"#;

/// The value of the sample of `name` whose labels include every one of `labels`.
fn sample(scrape: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (labelled, value) = rest.rsplit_once(' ')?;
        let all = labels
            .iter()
            .all(|(k, v)| labelled.contains(&format!("{k}=\"{v}\"")));
        (labelled.starts_with('{') && all).then(|| value.parse().ok())?
    })
}

#[tokio::test]
async fn a_scrape_counts_every_outcome_and_every_rules_decision() -> Result<(), BoxError> {
    // The one recorder of this test binary (this file holds one test).
    let handle = PrometheusBuilder::new().install_recorder()?;
    let clock = ManualClock::starting_at(Nanos::from_secs(15));
    let policy = Arc::new(Policy::from_toml(RULES, clock)?);
    // A shadow rule, one request a minute: it would deny the second admitted request.
    let trial = "[[rules]]\nname = \"trial\"\nlimit = 1\nwindow = \"1m\"\n";
    let shadow = Arc::new(Policy::from_toml(trial, ManualClock::new())?);
    let layer = RateLimitLayer::new(Arc::clone(&policy))
        .shadow(shadow)
        .key(ClientKey::header("x-api-key")?)
        .skip_method(Method::OPTIONS)
        .skip_path_prefix("/metrics")?;
    let app = Router::new()
        .route("/", get(|| async { "ok" }).merge(options(|| async { "" })))
        .route("/search", get(|| async { "found" }))
        .route("/metrics", get(move || async move { handle.render() }))
        .layer(layer);
    let addr = serve(app).await?;
    let key: &[(&str, &[u8])] = &[("x-api-key", b"acct_1")];

    // `/search` (api 1/2, search 1/1); again (search denies, so nothing is taken: all or
    // nothing); `/` (api 2/2); `/` (api denies); one keyless request; one preflight.
    let mut got = Vec::new();
    for path in ["/search", "/search", "/", "/"] {
        got.push(send(addr, path, key).await?.status.as_u16());
    }
    got.push(send(addr, "/", &[]).await?.status.as_u16());
    got.push(
        send_method(addr, Method::OPTIONS, "/", key)
            .await?
            .status
            .as_u16(),
    );
    assert_eq!(got, [200, 429, 200, 429, 400, 200]);
    // A reload applied and one refused: the policy's own metrics, which the layer's
    // `metrics` feature turns on.
    policy.reload_toml(RULES)?;
    assert!(policy.reload_toml("[[rules]]\nname = \"x\"\n").is_err());

    let scrape = send(addr, "/metrics", &[]).await?;
    assert_eq!(scrape.status, 200);
    let text = scrape.body.as_str();
    let requests = |outcome| {
        sample(
            text,
            "tollgate_http_requests_total",
            &[("outcome", outcome)],
        )
    };
    assert_eq!(requests("admitted"), Some(2.0), "{text}");
    assert_eq!(requests("denied"), Some(2.0), "{text}");
    assert_eq!(requests("bad_key"), Some(1.0), "{text}");
    // The preflight and the scrape itself.
    assert_eq!(requests("skipped"), Some(2.0), "{text}");
    assert_eq!(requests("too_costly"), None, "{text}");
    let rule = |rule, outcome| {
        sample(
            text,
            "tollgate_http_rule_decisions_total",
            &[("rule", rule), ("outcome", outcome), ("mode", "enforced")],
        )
    };
    // `api` would have admitted the second `/search` (which `search` denied).
    assert_eq!(rule("api", "allowed"), Some(3.0), "{text}");
    assert_eq!(rule("api", "denied"), Some(1.0), "{text}");
    assert_eq!(rule("search", "allowed"), Some(1.0), "{text}");
    assert_eq!(rule("search", "denied"), Some(1.0), "{text}");
    // The shadow rule saw the two admitted requests and would have denied the second,
    // which was served all the same.
    assert_eq!(requests("shadow_denied"), Some(1.0), "{text}");
    let shadow = |outcome| {
        sample(
            text,
            "tollgate_http_rule_decisions_total",
            &[("rule", "trial"), ("outcome", outcome), ("mode", "shadow")],
        )
    };
    assert_eq!(
        (shadow("allowed"), shadow("denied")),
        (Some(1.0), Some(1.0)),
        "{text}"
    );
    // Each checked request's check timed once (the keyless and the skipped ones were not
    // checked), every one of them taking some time.
    let unlabelled = |name: &str| {
        text.lines().find_map(|line| {
            line.strip_prefix(name)?
                .strip_prefix(' ')?
                .parse::<f64>()
                .ok()
        })
    };
    assert_eq!(
        unlabelled("tollgate_http_check_seconds_count"),
        Some(4.0),
        "{text}"
    );
    assert!(
        unlabelled("tollgate_http_check_seconds_sum").is_some_and(|s| s > 0.0),
        "{text}"
    );
    let reloads = |outcome| {
        sample(
            text,
            "tollgate_policy_reloads_total",
            &[("outcome", outcome)],
        )
    };
    assert_eq!(
        (reloads("applied"), reloads("refused")),
        (Some(1.0), Some(1.0)),
        "{text}"
    );
    assert_eq!(unlabelled("tollgate_policy_rules"), Some(2.0), "{text}");
    Ok(())
}
