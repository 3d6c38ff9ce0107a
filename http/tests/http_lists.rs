//! Allow and deny lists, `unlimited` rules and bans over a real axum server on loopback: a
//! refusal is a 403 with an RFC 9457 body carrying the rules file's reason and no
//! `Retry-After` (never a 429); an allowed or unlimited request gets the service's answer
//! with no rate-limit field (or the exempt header, when asked for); `on_denied` sees the
//! ban; a deny entry by network refuses peers by their address; a reload applies to the
//! next request.

mod http_support;

use std::sync::Arc;

use http::header::HeaderName;
use http_body_util::Full;
use http_support::lists::{app, RULES};
use http_support::{api_key, send, serve, BoxError};
use tollgate::policy::Policy;
use tollgate::{ManualClock, Nanos};
use tollgate_http::{ClientKey, HeaderStyle, RateLimitLayer};

#[tokio::test]
async fn bans_are_403_with_the_reason_and_no_retry_after() -> Result<(), BoxError> {
    let policy = Arc::new(Policy::from_toml(RULES, ManualClock::new())?);
    let layer = RateLimitLayer::new(policy).key(ClientKey::header("x-api-key")?);
    let addr = serve(app(layer.clone())).await?;

    let reply = send(addr, "/", &api_key("acct_666")).await?;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.header("content-type"), "application/problem+json");
    assert_eq!(reply.header("retry-after"), "");
    assert_eq!(reply.header("ratelimit"), "");
    assert_eq!(
        reply.body,
        r#"{"type":"about:blank","title":"Forbidden","status":403,"detail":"chargeback \"fraud\": write to billing@example.com","reason":"chargeback \"fraud\": write to billing@example.com","refused_by":"deny list"}"#
    );

    let reply = send(addr, "/v0/users", &api_key("anyone")).await?;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.header("retry-after"), "");
    assert_eq!(
        reply.body,
        r#"{"type":"about:blank","title":"Forbidden","status":403,"detail":"/v0 was retired: use /v1","reason":"/v0 was retired: use /v1","refused_by":"rule 'legacy'"}"#
    );

    // Over the limit is still a 429 with Retry-After.
    assert_eq!(send(addr, "/", &api_key("c")).await?.status, 200);
    let reply = send(addr, "/", &api_key("c")).await?;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.header("retry-after"), "60");

    let stats = layer.stats();
    assert_eq!((stats.refused, stats.denied, stats.admitted), (2, 1, 1));
    Ok(())
}

#[tokio::test]
async fn allowed_and_unlimited_requests_carry_no_fields_unless_asked() -> Result<(), BoxError> {
    let policy = Arc::new(Policy::from_toml(RULES, ManualClock::new())?);
    let plain = RateLimitLayer::new(Arc::clone(&policy)).key(ClientKey::header("x-api-key")?);
    let asked = plain
        .clone()
        .exempt_header(HeaderName::from_static("ratelimit-exempt"));
    let (plain, asked) = (serve(app(plain)).await?, serve(app(asked)).await?);
    for _ in 0..3 {
        for (client, kind) in [("probe", "allow"), ("batch-job", "unlimited")] {
            let reply = send(plain, "/", &api_key(client)).await?;
            assert_eq!((reply.status.as_u16(), reply.body.as_str()), (200, "ok"));
            for field in [
                "ratelimit",
                "ratelimit-policy",
                "retry-after",
                "ratelimit-exempt",
            ] {
                assert_eq!(reply.header(field), "", "{client} {field}");
            }
            let reply = send(asked, "/", &api_key(client)).await?;
            assert_eq!(reply.status, 200);
            assert_eq!(reply.header("ratelimit-exempt"), kind);
            assert_eq!(reply.header("ratelimit"), "");
        }
    }
    // A limited request still gets its fields, and no exempt header.
    let reply = send(asked, "/", &api_key("c")).await?;
    assert_eq!(reply.header("ratelimit-exempt"), "");
    assert!(reply.header("ratelimit").starts_with("\"default\";r=0"));
    // The probe's ban on /v0 does not apply: an allow entry comes before any rule.
    assert_eq!(
        send(plain, "/v0/users", &api_key("probe")).await?.status,
        200
    );
    Ok(())
}

#[tokio::test]
async fn on_denied_sees_the_ban_and_its_reason() -> Result<(), BoxError> {
    let policy = Arc::new(Policy::from_toml(RULES, ManualClock::new())?);
    let layer = RateLimitLayer::new(policy)
        .key(ClientKey::header("x-api-key")?)
        .on_denied(|denial| {
            let Some(listing) = denial.listing() else {
                return denial.default_response();
            };
            assert!(denial.is_ban() && denial.headers().get("retry-after").is_none());
            // Rendered by hand, in every style, a ban has no `Retry-After` either.
            for style in [HeaderStyle::Draft11, HeaderStyle::Legacy, HeaderStyle::None] {
                let rendered = style.render(denial.decision(), &[], denial.client());
                assert!(rendered.is_empty(), "{style:?}: {rendered:?}");
            }
            let mut response = http::Response::new(Full::from(format!(
                "{} says: {}",
                listing.subject(),
                listing.reason().unwrap_or("-")
            )));
            *response.status_mut() = http::StatusCode::UNAVAILABLE_FOR_LEGAL_REASONS;
            response
        });
    let addr = serve(app(layer)).await?;
    let reply = send(addr, "/v0/users", &api_key("x")).await?;
    assert_eq!(reply.status, 451);
    assert_eq!(reply.body, "legacy says: /v0 was retired: use /v1");
    assert_eq!(send(addr, "/", &api_key("x")).await?.status, 200);
    let reply = send(addr, "/", &api_key("x")).await?;
    assert_eq!(
        (reply.status.as_u16(), reply.header("retry-after")),
        (429, "60")
    );
    Ok(())
}

#[tokio::test]
async fn networks_refuse_peers_and_reloads_apply_to_the_next_request() -> Result<(), BoxError> {
    let clock = ManualClock::new();
    clock.set(Nanos::from_secs(60));
    let policy = Arc::new(Policy::from_toml(RULES, clock)?);
    let layer = RateLimitLayer::new(Arc::clone(&policy)).key(ClientKey::peer_ip());
    let addr = serve(app(layer)).await?;
    assert_eq!(send(addr, "/", &[]).await?.status, 200);
    let report = policy.reload_toml(&format!(
        "{RULES}\n[[deny]]\ncidr = \"127.0.0.0/8\"\nreason = \"no loopback callers\"\n"
    ))?;
    assert_eq!(report.listed(), ["deny cidr 127.0.0.0/8"]);
    let reply = send(addr, "/", &[]).await?;
    assert_eq!(reply.status, 403);
    assert!(
        reply.body.contains(r#""reason":"no loopback callers""#),
        "{}",
        reply.body
    );
    // Moved to the allow list: admitted without limits from the next request on.
    policy.reload_toml(&format!("{RULES}\n[[allow]]\ncidr = \"127.0.0.1/32\"\n"))?;
    for _ in 0..3 {
        assert_eq!(send(addr, "/", &[]).await?.status, 200);
    }
    Ok(())
}
