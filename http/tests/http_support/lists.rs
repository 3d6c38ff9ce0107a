//! The rules file and the app of the list tests (`http_lists`, `http_logs`): a default
//! rule, an `unlimited` rule for one client, a ban rule on `/v0`, an allow entry and a
//! deny entry by client.

use axum::routing::get;
use axum::Router;
use tollgate_http::RateLimitLayer;

pub(crate) const RULES: &str = r#"
[[rules]]
name = "default"
limit = 1
window = "1m"

[[rules]]
name = "batch"
client = "batch-job"
unlimited = true

[[rules]]
name = "legacy"
prefix = "/v0"
limit = 0
reason = "/v0 was retired: use /v1"

[[allow]]
client = "probe"

[[deny]]
client = "acct_666"
reason = "chargeback \"fraud\": write to billing@example.com"
"#;

pub(crate) fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/v0/users", get(|| async { "old" }))
        .layer(layer)
}
