//! The HTTP API, for every language that is not Envoy: `POST /v1/check` (the gRPC
//! service's question as JSON), `/healthz`, `/readyz`, `/metrics`; and the admin routes,
//! `GET /v1/rules`, `POST /v1/reload`, a client's state, `GET` / `DELETE
//! /v1/clients/{domain}?key=value&…` (the descriptor's entries in order), and the clients
//! limited now, `GET /v1/clients?limited&max=100`, served only on the admin listener or
//! behind the admin token (see [`admin`]).

use std::sync::Arc;

use axum::extract::{Json, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::{Deserialize, Serialize};
use tollgate::Nanos;

use crate::answer::{
    count, Ask, AskDescriptor, ClientError, Code, LimitedDescriptor, Refusal, ReloadError, Status,
    Verdict,
};
use crate::engine::Engine;

/// What the routes share.
#[derive(Clone)]
pub(crate) struct Api {
    pub(crate) engine: Arc<Engine>,
    pub(crate) metrics: PrometheusHandle,
    /// The fleet rules this server follows (`--fleet-rules`), whose status `/v1/rules`
    /// shows.
    pub(crate) fleet: Option<Arc<tollgate_redis::FleetRules>>,
}

/// `POST /v1/check`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody {
    domain: String,
    descriptors: Vec<DescriptorBody>,
    /// The cost of each descriptor without its own (default 1).
    #[serde(default)]
    hits: Option<u32>,
}

/// One descriptor of a [`CheckBody`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DescriptorBody {
    entries: Vec<EntryBody>,
    #[serde(default)]
    hits: Option<u64>,
    /// Gives the cost back instead of taking it.
    #[serde(default)]
    refund: bool,
}

/// One entry of a [`DescriptorBody`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryBody {
    key: String,
    #[serde(default)]
    value: String,
}

/// `POST /v1/check`'s answer.
#[derive(Debug, Serialize)]
struct CheckAnswer {
    allowed: bool,
    code: &'static str,
    statuses: Vec<StatusAnswer>,
    /// The draft-11 `RateLimit` headers of the enforced limits (also set on the response).
    headers: std::collections::BTreeMap<&'static str, String>,
}

/// One descriptor's part of a [`CheckAnswer`].
#[derive(Debug, Serialize)]
struct StatusAnswer {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<LimitAnswer>,
    /// Absent for a descriptor no limit applies to.
    #[serde(skip_serializing_if = "Option::is_none")]
    remaining: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reset_after_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
}

/// The limit of a [`StatusAnswer`], in Envoy's terms.
#[derive(Debug, Serialize)]
struct LimitAnswer {
    /// The limit's `name` in the config, if it has one.
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    requests_per_unit: u32,
    unit: &'static str,
}

/// The public routes.
pub(crate) fn public(api: Api) -> Router {
    Router::new()
        .route("/v1/check", post(check))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .with_state(api)
}

/// The admin routes; with `token`, each request must carry `Authorization: Bearer <token>`.
pub(crate) fn admin(api: Api, token: Option<Arc<str>>) -> Router {
    Router::new()
        .route("/v1/rules", get(rules))
        .route("/v1/reload", post(reload))
        .route("/v1/clients", get(limited))
        .route("/v1/clients/{domain}", get(inspect).delete(reset))
        .route_layer(axum::middleware::from_fn(move |request: axum::extract::Request, next: axum::middleware::Next| {
            let token = token.clone();
            async move {
                if let Some(token) = token {
                    let given = request
                        .headers()
                        .get(header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.strip_prefix("Bearer "));
                    if !given.is_some_and(|given| same_secret(given, &token)) {
                        tracing::warn!(path = %request.uri().path(), "admin request without the admin token refused");
                        return (StatusCode::UNAUTHORIZED, error_body("admin token required")).into_response();
                    }
                }
                next.run(request).await
            }
        }))
        .with_state(api)
}

/// Whether `given` is `token`, in a time that does not tell how much of it matched.
fn same_secret(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |differ, (a, b)| differ | (a ^ b))
            == 0
}

/// `POST /v1/check`: the body is read as JSON whatever its `content-type` says (a
/// `curl -d` sends `application/x-www-form-urlencoded`).
async fn check(State(api): State<Api>, body: axum::body::Bytes) -> Response {
    let body: CheckBody = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(e) => {
            count("http", "invalid");
            return (
                StatusCode::BAD_REQUEST,
                error_body(&format!("the body: {e}")),
            )
                .into_response();
        }
    };
    match api.engine.decide_whole("http", body, ask_of).await {
        Ok(verdict) => answer(verdict),
        Err(refusal) => {
            count("http", "invalid");
            (StatusCode::BAD_REQUEST, error_body(&refusal.to_string())).into_response()
        }
    }
}

/// `body` as the engine's question.
fn ask_of(body: &CheckBody) -> Result<Ask<'_>, Refusal> {
    let mut ask = Ask {
        domain: &body.domain,
        hits: body.hits.unwrap_or(1),
        descriptors: Vec::with_capacity(body.descriptors.len()),
    };
    for descriptor in &body.descriptors {
        let mut asked = AskDescriptor {
            hits: descriptor.hits,
            negative: descriptor.refund,
            entries: Vec::with_capacity(descriptor.entries.len()),
        };
        for entry in &descriptor.entries {
            asked.entries.push((&entry.key, &entry.value));
        }
        ask.descriptors.push(asked);
    }
    Ok(ask)
}

/// `verdict` as JSON, `200` under the limit and `429` over it, with its headers.
fn answer(verdict: Verdict) -> Response {
    let status = match verdict.code {
        Code::Ok => StatusCode::OK,
        Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
    };
    count("http", verdict.code.name());
    let mut headers = HeaderMap::new();
    for (name, value) in &verdict.headers {
        if let Ok(value) = value.parse() {
            headers.insert(*name, value);
        }
    }
    let body = CheckAnswer {
        allowed: verdict.code == Code::Ok,
        code: verdict.code.name(),
        statuses: verdict.statuses.into_iter().map(status_answer).collect(),
        headers: verdict.headers.into_iter().collect(),
    };
    (status, headers, Json(body)).into_response()
}

fn status_answer(status: Status) -> StatusAnswer {
    let limited = status.reset_after.is_some();
    StatusAnswer {
        code: status.code.name(),
        limit: status
            .limit
            .map(|(name, requests_per_unit, unit)| LimitAnswer {
                name: name.into(),
                requests_per_unit,
                unit: unit.as_str(),
            }),
        remaining: limited.then_some(status.remaining),
        reset_after_ms: status.reset_after.map(millis),
        retry_after_ms: status.retry_after.map(millis),
    }
}

/// Whole milliseconds, rounded up.
fn millis(span: Nanos) -> u64 {
    span.as_u64().div_ceil(1_000_000)
}

fn error_body(message: &str) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "error": message }))
}

async fn ready(State(api): State<Api>) -> Response {
    if api.engine.ready().await {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the store does not answer\n",
        )
            .into_response()
    }
}

async fn metrics(State(api): State<Api>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        api.metrics.render(),
    )
        .into_response()
}

async fn rules(State(api): State<Api>) -> Response {
    let domains = api.engine.domains();
    let fleet = api.fleet.as_ref().map(|fleet| {
        let status = fleet.status();
        serde_json::json!({
            "version": status.version,
            "latest": status.latest,
            "subscribed": status.subscribed,
            "refused": status.refused,
            "failures": status.failures,
            "last_error": status.last_error,
        })
    });
    Json(serde_json::json!({
        "version": api.engine.version(),
        "source": api.engine.source().display().to_string(),
        "fleet": fleet,
        "domains": domains.summary(),
    }))
    .into_response()
}

async fn reload(State(api): State<Api>) -> Response {
    match api.engine.reload().await {
        Ok(version) => Json(serde_json::json!({ "version": version })).into_response(),
        Err(e @ ReloadError::FollowsTheFleet) => (
            StatusCode::CONFLICT,
            Json(serde_json::json!({ "error": e.to_string(), "version": api.engine.version() })),
        )
            .into_response(),
        Err(e) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(serde_json::json!({ "error": e.to_string(), "version": api.engine.version() })),
        )
            .into_response(),
    }
}

/// `GET /v1/clients/{domain}?key=value&…`: the state of the client the descriptor with
/// those entries (in order) is counted as, charging nothing.
async fn inspect(
    State(api): State<Api>,
    Path(domain): Path<String>,
    Query(entries): Query<Vec<(String, String)>>,
) -> Response {
    client(&api, &domain, &entries, false).await
}

/// `DELETE /v1/clients/{domain}?key=value&…`: forgets that client's state (a fresh
/// client from now on), then answers its state as `GET` does.
async fn reset(
    State(api): State<Api>,
    Path(domain): Path<String>,
    Query(entries): Query<Vec<(String, String)>>,
) -> Response {
    let answer = client(&api, &domain, &entries, true).await;
    if answer.status().is_success() {
        tracing::info!(%domain, ?entries, "client reset by the admin API");
    }
    answer
}

/// A client's state as JSON: 404 if no limit applies to it, 400 for a question the engine
/// refuses, 503 if the store did not take a reset or did not answer the read.
async fn client(api: &Api, domain: &str, entries: &[(String, String)], reset: bool) -> Response {
    let entries: Vec<(&str, &str)> = entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    match api.engine.client(domain, &entries, reset).await {
        Ok(Some(state)) => {
            let tiers: Vec<_> = state
                .tiers
                .iter()
                .map(|t| {
                    serde_json::json!({
                        "name": &*t.name,
                        "quota": t.quota,
                        "remaining": t.remaining,
                        "reset_after_ms": millis(t.reset_after),
                    })
                })
                .collect();
            Json(serde_json::json!({
                "domain": domain,
                "reset": reset,
                "status": status_answer(state.status),
                "tiers": tiers,
            }))
            .into_response()
        }
        Ok(None) => (
            StatusCode::NOT_FOUND,
            error_body("no limit applies to this descriptor"),
        )
            .into_response(),
        Err(e @ ClientError::Refused(_)) => {
            (StatusCode::BAD_REQUEST, error_body(&e.to_string())).into_response()
        }
        Err(e @ (ClientError::StoreFailed | ClientError::Unanswered)) => {
            tracing::error!(%domain, ?entries, reset, "a client's state: {e}");
            (StatusCode::SERVICE_UNAVAILABLE, error_body(&e.to_string())).into_response()
        }
    }
}

/// The default of `GET /v1/clients?limited`'s `max`.
const DEFAULT_LISTED: usize = 100;

/// The largest `max` of `GET /v1/clients?limited`.
pub(crate) const MAX_LISTED: usize = 1000;

/// `GET /v1/clients?limited&max=N`: at most `N` (default 100, at most [`MAX_LISTED`])
/// clients a request would be denied for now under an enforced limit, each with its
/// descriptor and every tier of its limit, charging nothing: 400 for another question or
/// a bad `max`, 503 if the store did not answer.
async fn limited(State(api): State<Api>, Query(query): Query<Vec<(String, String)>>) -> Response {
    let bad = |message: String| (StatusCode::BAD_REQUEST, error_body(&message)).into_response();
    let mut max = DEFAULT_LISTED;
    let mut asked = false;
    for (key, value) in &query {
        match key.as_str() {
            "limited" if value.is_empty() || value == "true" => asked = true,
            "max" => match value.parse::<usize>() {
                Ok(n) if (1..=MAX_LISTED).contains(&n) => max = n,
                Ok(_) | Err(_) => {
                    return bad(format!(
                        "max: a number of clients from 1 to {MAX_LISTED}, not {value:?}"
                    ))
                }
            },
            other => {
                return bad(format!(
                    "{other}: not a question of /v1/clients (GET /v1/clients?limited&max=100)"
                ))
            }
        }
    }
    if !asked {
        return bad(
            "only the clients limited now are listed: GET /v1/clients?limited&max=100".to_owned(),
        );
    }
    let Some(listed) = api.engine.limited(max).await else {
        tracing::error!(max, "the limited clients: the store did not answer");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            error_body("the store did not answer: the limited clients are unknown (see the server's log and tollgate_redis metrics)"),
        )
            .into_response();
    };
    let clients: Vec<_> = listed.clients.iter().map(limited_answer).collect();
    Json(serde_json::json!({
        "clients": clients,
        "complete": listed.complete,
    }))
    .into_response()
}

/// One client of `GET /v1/clients?limited`, as JSON.
fn limited_answer(client: &LimitedDescriptor) -> serde_json::Value {
    let entries: Vec<_> = client
        .entries
        .iter()
        .map(|(key, value)| serde_json::json!({ "key": key, "value": value }))
        .collect();
    let tiers: Vec<_> = client
        .tiers
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": &*t.state.name,
                "quota": t.state.quota,
                "remaining": t.state.remaining,
                "reset_after_ms": millis(t.state.reset_after),
                "denies": t.denies,
                "retry_after_ms": millis(t.retry_after),
            })
        })
        .collect();
    serde_json::json!({
        "domain": client.domain,
        "entries": entries,
        "rule": client.rule,
        "retry_after_ms": millis(client.retry_after),
        "tiers": tiers,
    })
}
