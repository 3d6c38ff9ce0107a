//! The HTTP API of the real `tollgate-server` binary on loopback: `POST /v1/check` answers
//! as the gRPC service does (JSON, `200` / `429`, the draft-11 headers), bad input is a
//! `400` naming it; `/healthz`, `/readyz`, `/metrics`; the admin routes are off unless
//! given a listener or a token, refuse a request without the token, list the rules and
//! reload them, inspect, reset and list the clients limited; a stop with a client's
//! connection open ends after the grace.

mod support;

use support::{http, Server};

const RULES: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: year
      requests_per_unit: 2
  - key: plan
    value: gold
    rate_limit:
      name: gold
      tiers:
        - { name: burst, limit: 5, window: 1s, algorithm: token_bucket }
        - { name: daily, limit: 1000, window: 1d, algorithm: sliding_window_counter }
"#;

fn check(server: &Server, body: &str) -> support::Answer {
    http(server.http, "POST", "/v1/check", &[], body)
}

#[test]
fn check_answers_as_json_with_the_headers() {
    let server = Server::start(RULES, &[], &[]);
    let alice = r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}"#;
    let first = check(&server, alice);
    assert_eq!(first.status, 200, "{}", first.body);
    let json = first.json();
    assert_eq!(json["allowed"], true);
    assert_eq!(json["statuses"][0]["code"], "OK");
    assert_eq!(json["statuses"][0]["remaining"], 1);
    assert_eq!(json["statuses"][0]["limit"]["requests_per_unit"], 2);
    assert_eq!(json["statuses"][0]["limit"]["unit"], "YEAR");
    assert_eq!(
        first.header("ratelimit-policy"),
        Some(r#""api.user";q=2;w=31536000"#)
    );
    assert!(first
        .header("ratelimit")
        .unwrap()
        .starts_with(r#""api.user";r=1;t="#));
    assert_eq!(check(&server, alice).status, 200);
    let denied = check(&server, alice);
    assert_eq!(denied.status, 429);
    assert_eq!(denied.json()["code"], "OVER_LIMIT");
    assert!(denied.header("retry-after").is_some());
    assert_eq!(denied.json()["statuses"][0]["code"], "OVER_LIMIT");
    // tollgate's own tiers, by name; a cost of 4 of the burst's 5.
    let gold =
        r#"{"domain":"api","hits":4,"descriptors":[{"entries":[{"key":"plan","value":"gold"}]}]}"#;
    let answer = check(&server, gold);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["statuses"][0]["remaining"], 1);
    assert_eq!(
        answer.header("ratelimit-policy"),
        Some(r#""burst";q=5;w=1, "daily";q=1000;w=86400"#)
    );
    assert_eq!(check(&server, gold).status, 429);
    // A descriptor no rule has: OK, nothing limited.
    let other = check(
        &server,
        r#"{"domain":"api","descriptors":[{"entries":[{"key":"x","value":"y"}]}]}"#,
    );
    assert_eq!(other.status, 200);
    assert_eq!(
        other.json()["statuses"][0],
        serde_json::json!({ "code": "OK" })
    );
}

/// The README's example: the rules file it shows, the `curl` it shows (a form content type,
/// as `curl -d` sends: the body is JSON all the same).
#[test]
fn the_readme_example_answers_its_curl() {
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/rules.yaml");
    let server = Server::start_on(&rules, &[], &[]);
    let body = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"},{"key":"path","value":"/login"}]}]}"#;
    let form = [("content-type", "application/x-www-form-urlencoded")];
    let answer = http(server.http, "POST", "/v1/check", &form, body);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let json = answer.json();
    assert_eq!(json["statuses"][0]["limit"]["name"], "login");
    assert_eq!(json["statuses"][0]["remaining"], 4);
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    assert!(
        readme.contains(&format!("-d '{body}'")),
        "README's curl sends this body"
    );
}

#[test]
fn bad_input_is_a_400_that_names_it() {
    let server = Server::start(RULES, &[], &[]);
    for (body, error) in [
        (
            r#"{"domain":"","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#,
            "rate limit domain must not be empty",
        ),
        (
            r#"{"domain":"api","descriptors":[]}"#,
            "rate limit descriptor list must not be empty",
        ),
        (
            r#"{"domain":"api","descriptors":[{"entries":[]}]}"#,
            "descriptors[0]: no entries",
        ),
        (
            r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"a"}],"hits":4294967296}]}"#,
            "descriptors[0].hits_addend: above 4294967295",
        ),
    ] {
        let answer = check(&server, body);
        assert_eq!(answer.status, 400, "{body}");
        assert_eq!(answer.json()["error"], error, "{body}");
    }
    let answer = check(&server, r#"{"domain":"api","descriptor":[]}"#);
    assert_eq!(answer.status, 400);
    assert!(
        answer.json()["error"]
            .as_str()
            .unwrap()
            .contains("unknown field `descriptor`"),
        "{}",
        answer.body
    );
    let answer = check(&server, "not json");
    assert_eq!(answer.status, 400);
}

#[test]
fn health_readiness_and_metrics() {
    let server = Server::start(RULES, &[], &[]);
    assert_eq!(http(server.http, "GET", "/healthz", &[], "").status, 200);
    assert_eq!(http(server.http, "GET", "/readyz", &[], "").status, 200);
    check(
        &server,
        r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"m"}]}]}"#,
    );
    let metrics = http(server.http, "GET", "/metrics", &[], "");
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .body
            .contains(r#"tollgate_server_requests_total{api="http",code="OK"} 1"#),
        "{}",
        metrics.body
    );
}

/// Each reload is counted once in `tollgate_policy_reloads_total{outcome}` (the server's
/// two policies, enforced and shadow, each counted the same reload), and logged once; a
/// reload refused for a file that does not load is counted `refused` (it never reached
/// the policy, which alone counted).
#[test]
fn a_reload_is_counted_once_and_a_refused_one_is_counted() {
    let server = Server::start(RULES, &["--admin", "127.0.0.1:0"], &[]);
    let admin = server.admin.unwrap();
    std::fs::write(
        &server.rules,
        RULES.replace("requests_per_unit: 2", "requests_per_unit: 7"),
    )
    .unwrap();
    assert_eq!(http(admin, "POST", "/v1/reload", &[], "").status, 200);
    std::fs::write(&server.rules, "domain: api\ndescriptors: [\n").unwrap();
    assert_eq!(http(admin, "POST", "/v1/reload", &[], "").status, 422);
    let metrics = http(server.http, "GET", "/metrics", &[], "").body;
    for counted in [
        r#"tollgate_policy_reloads_total{outcome="applied"} 1"#,
        r#"tollgate_policy_reloads_total{outcome="refused"} 1"#,
    ] {
        assert!(metrics.contains(counted), "{counted}: {metrics}");
    }
    assert_eq!(
        server.log().matches("tollgate: rules reloaded").count(),
        1,
        "{}",
        server.log()
    );
}

/// A config that loads no domain (a directory whose files are not `*.yaml` / `*.yml`)
/// limits nothing: the server says so at start, rather than answering every call OK in
/// silence.
#[test]
fn a_start_on_no_domain_is_logged() {
    let dir = support::temp_dir();
    std::fs::write(dir.join("rules.yaml.bak"), RULES).unwrap();
    let server = Server::start_on(&dir, &[], &[]);
    let open = check(
        &server,
        r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#,
    );
    assert_eq!(open.status, 200);
    let (_, log) = server.stop();
    assert!(log.contains("WARN") && log.contains("no domain"), "{log}");
}

#[test]
fn admin_routes_are_off_by_default_and_behind_the_token() {
    let open = Server::start(RULES, &[], &[]);
    assert_eq!(http(open.http, "GET", "/v1/rules", &[], "").status, 404);
    assert_eq!(http(open.http, "POST", "/v1/reload", &[], "").status, 404);
    assert!(open.log().contains("admin routes off"));

    let guarded = Server::start(RULES, &[], &[("TOLLGATE_ADMIN_TOKEN", "s3cret")]);
    assert_eq!(http(guarded.http, "GET", "/v1/rules", &[], "").status, 401);
    assert_eq!(
        http(
            guarded.http,
            "GET",
            "/v1/rules",
            &[("authorization", "Bearer wrong")],
            ""
        )
        .status,
        401
    );
    let auth = [("authorization", "Bearer s3cret")];
    let rules = http(guarded.http, "GET", "/v1/rules", &auth, "");
    assert_eq!(rules.status, 200, "{}", rules.body);
    let json = rules.json();
    assert_eq!(json["version"], 1);
    assert!(json["domains"].to_string().contains("api"), "{json}");
    // A reload of a changed file: the next version, the new limit.
    std::fs::write(
        &guarded.rules,
        RULES.replace("requests_per_unit: 2", "requests_per_unit: 7"),
    )
    .unwrap();
    let reloaded = http(guarded.http, "POST", "/v1/reload", &auth, "");
    assert_eq!(reloaded.status, 200, "{}", reloaded.body);
    assert_eq!(reloaded.json()["version"], 2);
    let answer = check(
        &guarded,
        r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"z"}]}]}"#,
    );
    assert_eq!(answer.json()["statuses"][0]["remaining"], 6);
    // A broken file: 422 naming the field, version and rules unchanged.
    std::fs::write(
        &guarded.rules,
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit: { unit: year }\n",
    )
    .unwrap();
    let refused = http(guarded.http, "POST", "/v1/reload", &auth, "");
    assert_eq!(refused.status, 422, "{}", refused.body);
    let json = refused.json();
    assert_eq!(json["version"], 2);
    assert!(
        json["error"]
            .as_str()
            .unwrap()
            .contains("descriptors[0].rate_limit"),
        "{json}"
    );

    // On a listener of their own: not on the public one.
    let split = Server::start(RULES, &["--admin", "127.0.0.1:0"], &[]);
    let admin = split.admin.unwrap();
    assert_eq!(http(admin, "GET", "/v1/rules", &[], "").status, 200);
    assert_eq!(http(split.http, "GET", "/v1/rules", &[], "").status, 404);
}

#[test]
fn an_operator_inspects_and_resets_a_client() {
    let server = Server::start(RULES, &["--admin", "127.0.0.1:0"], &[]);
    let admin = server.admin.unwrap();
    // Not on the public listener.
    assert_eq!(
        http(server.http, "GET", "/v1/clients/api?user=alice", &[], "").status,
        404
    );
    let alice = r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}"#;
    let fresh = http(admin, "GET", "/v1/clients/api?user=alice", &[], "");
    assert_eq!(fresh.status, 200, "{}", fresh.body);
    assert_eq!(fresh.json()["status"]["code"], "OK");
    assert_eq!(fresh.json()["status"]["remaining"], 2);
    for _ in 0..2 {
        assert_eq!(check(&server, alice).status, 200);
    }
    // Spent: inspecting says so, with the wait, and charges nothing (twice, same answer).
    for _ in 0..2 {
        let spent = http(admin, "GET", "/v1/clients/api?user=alice", &[], "");
        let json = spent.json();
        assert_eq!(json["reset"], false);
        assert_eq!(json["status"]["code"], "OVER_LIMIT", "{json}");
        assert_eq!(json["status"]["remaining"], 0);
        assert!(json["status"]["retry_after_ms"].as_u64().unwrap() > 0);
        assert_eq!(json["tiers"].as_array().unwrap().len(), 1, "{json}");
        assert_eq!(json["tiers"][0]["quota"], 2);
        assert_eq!(json["tiers"][0]["remaining"], 0);
    }
    // Another client is untouched by alice's state.
    let bob = http(admin, "GET", "/v1/clients/api?user=bob", &[], "");
    assert_eq!(bob.json()["status"]["remaining"], 2);
    // The reset: alice is whole again, and admitted.
    let reset = http(admin, "DELETE", "/v1/clients/api?user=alice", &[], "");
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(reset.json()["reset"], true);
    assert_eq!(reset.json()["status"]["code"], "OK");
    assert_eq!(reset.json()["status"]["remaining"], 2);
    assert_eq!(check(&server, alice).status, 200);
    assert_eq!(
        http(admin, "GET", "/v1/clients/api?user=alice", &[], "").json()["status"]["remaining"],
        1
    );
    // tollgate's own tiers: each one's state.
    let gold =
        r#"{"domain":"api","hits":3,"descriptors":[{"entries":[{"key":"plan","value":"gold"}]}]}"#;
    assert_eq!(check(&server, gold).status, 200);
    let tiers = http(admin, "GET", "/v1/clients/api?plan=gold", &[], "").json()["tiers"].clone();
    assert_eq!(tiers[0]["name"], "burst", "{tiers}");
    assert_eq!(tiers[0]["remaining"], 2);
    assert_eq!(tiers[1]["name"], "daily");
    assert_eq!(tiers[1]["remaining"], 997);
    // No limit applies: 404; a bad question: 400 naming it.
    let none = http(admin, "GET", "/v1/clients/api?x=y", &[], "");
    assert_eq!(none.status, 404, "{}", none.body);
    let none = http(admin, "DELETE", "/v1/clients/other?user=alice", &[], "");
    assert_eq!(none.status, 404, "{}", none.body);
    let empty = http(admin, "GET", "/v1/clients/api", &[], "");
    assert_eq!(empty.status, 400, "{}", empty.body);
    assert_eq!(empty.json()["error"], "descriptors[0]: no entries");
    assert!(server.log().contains("client reset by the admin API"));
}

/// A descriptor only one request can reach (`plan: gold`, every level a literal value)
/// is a client like any other to the operator: listed once it is refused, and a reset
/// lifts it (it answered `"reset": true` and kept the state, and was never listed).
#[test]
fn an_operator_lists_and_resets_a_descriptor_only_one_request_reaches() {
    let server = Server::start(RULES, &["--admin", "127.0.0.1:0"], &[]);
    let admin = server.admin.unwrap();
    let gold =
        r#"{"domain":"api","hits":5,"descriptors":[{"entries":[{"key":"plan","value":"gold"}]}]}"#;
    assert_eq!(check(&server, gold).status, 200);
    assert_eq!(check(&server, gold).status, 429);
    let listed = http(admin, "GET", "/v1/clients?limited", &[], "").json();
    assert_eq!(
        listed["clients"][0]["entries"],
        serde_json::json!([{"key": "plan", "value": "gold"}]),
        "{listed}"
    );
    assert_eq!(listed["clients"][0]["rule"], "gold", "{listed}");
    let reset = http(admin, "DELETE", "/v1/clients/api?plan=gold", &[], "");
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(reset.json()["status"]["code"], "OK", "{}", reset.body);
    assert_eq!(reset.json()["tiers"][0]["remaining"], 5, "{}", reset.body);
    assert_eq!(check(&server, gold).status, 200);
}

#[test]
fn an_operator_lists_the_clients_limited_now() {
    let server = Server::start(RULES, &[], &[("TOLLGATE_ADMIN_TOKEN", "s3cret")]);
    let auth = [("authorization", "Bearer s3cret")];
    let list = |query: &str| {
        http(
            server.http,
            "GET",
            &format!("/v1/clients?{query}"),
            &auth,
            "",
        )
    };
    let user = |name: &str| {
        format!(
            r#"{{"domain":"api","descriptors":[{{"entries":[{{"key":"user","value":"{name}"}}]}}]}}"#
        )
    };
    // Nobody yet; behind the token.
    let empty = list("limited");
    assert_eq!(empty.status, 200, "{}", empty.body);
    assert_eq!(empty.json()["clients"], serde_json::json!([]));
    assert_eq!(empty.json()["complete"], true);
    assert_eq!(
        http(server.http, "GET", "/v1/clients?limited", &[], "").status,
        401
    );
    // alice and bob over their yearly 2, carol under it.
    for name in ["alice", "bob"] {
        for _ in 0..2 {
            assert_eq!(check(&server, &user(name)).status, 200);
        }
        assert_eq!(check(&server, &user(name)).status, 429);
    }
    assert_eq!(check(&server, &user("carol")).status, 200);
    let listed = list("limited&max=10");
    assert_eq!(listed.status, 200, "{}", listed.body);
    let json = listed.json();
    assert_eq!(json["complete"], true, "{json}");
    let clients = json["clients"].as_array().unwrap();
    let names: Vec<_> = clients
        .iter()
        .map(|c| c["entries"][0]["value"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alice", "bob"], "{json}");
    let alice = &clients[0];
    assert_eq!(alice["domain"], "api");
    assert_eq!(
        alice["entries"],
        serde_json::json!([{"key": "user", "value": "alice"}])
    );
    assert!(alice["retry_after_ms"].as_u64().unwrap() > 0, "{alice}");
    assert_eq!(alice["tiers"].as_array().unwrap().len(), 1);
    assert_eq!(alice["tiers"][0]["quota"], 2);
    assert_eq!(alice["tiers"][0]["remaining"], 0);
    assert_eq!(alice["tiers"][0]["denies"], true);
    // Listing charged no one: carol is still admitted once more.
    assert_eq!(check(&server, &user("carol")).status, 200);
    // Bounded by max; a reset client is no longer listed.
    let one = list("limited&max=1").json();
    assert_eq!(one["clients"].as_array().unwrap().len(), 1);
    assert_eq!(one["complete"], false);
    let reset = http(
        server.http,
        "DELETE",
        "/v1/clients/api?user=alice",
        &auth,
        "",
    );
    assert_eq!(reset.status, 200, "{}", reset.body);
    let after = list("limited").json();
    let names: Vec<_> = after["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["entries"][0]["value"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["bob"], "{after}");
    // A bad max, or another question: 400 naming it.
    for query in [
        "limited&max=0",
        "limited&max=1001",
        "limited&max=x",
        "max=5",
        "",
        "limited&user=bob",
    ] {
        let refused = list(query);
        assert_eq!(refused.status, 400, "{query}: {}", refused.body);
        assert!(refused.json()["error"].is_string(), "{query}");
    }
    assert!(list("limited&max=x").json()["error"]
        .as_str()
        .unwrap()
        .starts_with("max:"));
}

#[test]
fn a_stop_with_a_connection_open_ends_after_the_grace() {
    let server = Server::start(RULES, &["--shutdown-grace", "500ms"], &[]);
    // A gRPC client that keeps its connection open and is never polled again, as an
    // Envoy that ignores the server's goodbye.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = runtime.block_on(async {
        let mut client = server.client().await;
        let call = support::request("api", vec![support::descriptor(&[("user", "held")])], 1);
        client.should_rate_limit(call).await.unwrap();
        client
    });
    let (status, log) = server.stop();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("connections still open after the shutdown grace"),
        "{log}"
    );
    drop((client, runtime));
}

/// `--redis-failure` decides what a check answers while Redis does not (here a Redis no
/// server listens on): by default it fails closed (every call over the limit), `open`
/// admits (Envoy's `failure_mode_deny: false` then means what it says), and
/// `fallback=SHARE` decides in the server on that share of each limit.
#[test]
fn the_redis_failure_flag_decides_what_an_outage_answers() {
    // A port nothing listens on: every Redis call fails at once, refused.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", dead.local_addr().unwrap());
    drop(dead);
    let alice = r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}"#;
    for (mode, want) in [
        (None, [429, 429, 429]),
        (Some("closed"), [429, 429, 429]),
        (Some("open"), [200, 200, 200]),
        // Half of 2 a year: one call.
        (Some("fallback=0.5"), [200, 429, 429]),
    ] {
        let mut args = vec!["--redis", url.as_str()];
        args.extend(mode.iter().flat_map(|m| ["--redis-failure", *m]));
        let server = Server::start(RULES, &args, &[]);
        let got = [(); 3].map(|()| check(&server, alice).status);
        assert_eq!(got, want, "{mode:?}");
        let _ = server.stop();
    }
}
