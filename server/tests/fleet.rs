//! A fleet of two `tollgate-server` processes on one real `redis-server` (and on a 3-master
//! Redis Cluster): calls spread
//! over both are admitted exactly up to the limit, decided all or nothing across them, and
//! a rule raised on both applies to the state they share; a client one server limited is
//! listed by the other; readiness says whether the store answers.

mod support;

#[path = "../../redis/tests/redis_support/server.rs"]
mod redis_server;

use redis_server::RedisServer;
use support::{descriptor, http, request, summary, Server};

const RULES: &str = r#"
domain: fleet
descriptors:
  - key: account
    rate_limit:
      unit: year
      requests_per_unit: 20
  - key: org
    rate_limit:
      unit: year
      requests_per_unit: 30
"#;

#[test]
fn two_servers_on_one_redis_admit_exactly_the_limit() {
    let redis = RedisServer::start();
    let url = redis.url();
    let args = ["--redis", url.as_str(), "--redis-prefix", "fleet"];
    let a = Server::start(RULES, &args, &[]);
    let b = Server::start_on(&a.rules, &args, &[]);
    for server in [&a, &b] {
        assert_eq!(http(server.http, "GET", "/readyz", &[], "").status, 200);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let admitted = runtime.block_on(async {
        let (ca, cb) = (a.client().await, b.client().await);
        // 4 tasks, two per server, 15 calls each, for one account: 20 admitted in all.
        let mut tasks = Vec::new();
        for (i, client) in [ca.clone(), cb.clone(), ca, cb].into_iter().enumerate() {
            tasks.push(tokio::spawn(async move {
                let mut client = client;
                let mut admitted = 0;
                for _ in 0..15 {
                    let call = request("fleet", vec![descriptor(&[("account", "acct_123")])], 1);
                    let answer = client.should_rate_limit(call).await.unwrap().into_inner();
                    if answer.overall_code == 1 {
                        admitted += 1;
                    }
                }
                (i, admitted)
            }));
        }
        let mut total = 0;
        for task in tasks {
            total += task.await.unwrap().1;
        }
        total
    });
    assert_eq!(admitted, 20);
    runtime.block_on(async {
        // All or nothing across the fleet: the account is spent, so the org keeps its
        // permit (a denied call reports what it would have left untaken), on either server.
        let mut ca = a.client().await;
        let both = request(
            "fleet",
            vec![
                descriptor(&[("org", "acme")]),
                descriptor(&[("account", "acct_123")]),
            ],
            1,
        );
        let denied = ca.should_rate_limit(both).await.unwrap().into_inner();
        assert_eq!(
            summary(&denied),
            (2, vec![(1, 30, Some(30)), (2, 0, Some(20))])
        );
        let mut cb = b.client().await;
        let org = request("fleet", vec![descriptor(&[("org", "acme")])], 1);
        let answer = cb.should_rate_limit(org).await.unwrap().into_inner();
        assert_eq!(summary(&answer), (1, vec![(1, 29, Some(30))]));
    });
    // The operator raises the account to 50 on both: the 20 used still count on each.
    std::fs::write(
        &a.rules,
        RULES.replace("requests_per_unit: 20", "requests_per_unit: 50"),
    )
    .unwrap();
    a.signal("HUP");
    b.signal("HUP");
    for server in [&a, &b] {
        let start = std::time::Instant::now();
        while !server.log().contains("rules reloaded") {
            assert!(start.elapsed() < std::time::Duration::from_secs(30));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    runtime.block_on(async {
        for (server, remaining) in [(&a, 29), (&b, 28)] {
            let mut client = server.client().await;
            let call = request("fleet", vec![descriptor(&[("account", "acct_123")])], 1);
            let answer = client.should_rate_limit(call).await.unwrap().into_inner();
            assert_eq!(summary(&answer), (1, vec![(1, remaining, Some(50))]));
        }
    });
}

/// The arguments of a server on the Redis at `url`, its keys under `prefix`, with its
/// admin routes on a listener of their own.
fn admin_on_redis<'a>(url: &'a str, prefix: &'a str) -> [&'a str; 6] {
    [
        "--redis",
        url,
        "--redis-prefix",
        prefix,
        "--admin",
        "127.0.0.1:0",
    ]
}

/// An operator resets a client on one server: the state lives in Redis, so the other
/// server sees it whole again too.
#[test]
fn a_reset_on_one_server_is_seen_by_the_fleet() {
    let redis = RedisServer::start();
    let url = redis.url();
    let args = admin_on_redis(&url, "reset");
    let a = Server::start(RULES, &args, &[]);
    let b = Server::start_on(&a.rules, &args, &[]);
    let body =
        r#"{"domain":"fleet","descriptors":[{"entries":[{"key":"account","value":"acct_9"}]}]}"#;
    let mut admitted = 0;
    for i in 0..24 {
        let server = if i % 2 == 0 { &a } else { &b };
        if http(server.http, "POST", "/v1/check", &[], body).status == 200 {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 20);
    let path = "/v1/clients/fleet?account=acct_9";
    for server in [&a, &b] {
        let state = http(server.admin.unwrap(), "GET", path, &[], "").json();
        assert_eq!(state["status"]["code"], "OVER_LIMIT", "{state}");
        assert_eq!(state["status"]["remaining"], 0);
    }
    let reset = http(a.admin.unwrap(), "DELETE", path, &[], "");
    assert_eq!(reset.status, 200, "{}", reset.body);
    let seen = http(b.admin.unwrap(), "GET", path, &[], "").json();
    assert_eq!(seen["status"]["remaining"], 20, "{seen}");
    // The server that reset admits at once; the other once its cached deny is gone (the
    // store's deny cache lives at most a second by default: it cannot see another
    // process's reset).
    assert_eq!(http(a.http, "POST", "/v1/check", &[], body).status, 200);
    let start = std::time::Instant::now();
    while http(b.http, "POST", "/v1/check", &[], body).status != 200 {
        assert!(start.elapsed() < std::time::Duration::from_secs(10));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A reset Redis does not take is the operator's 503, and says so.
    drop(redis);
    let failed = http(a.admin.unwrap(), "DELETE", path, &[], "");
    assert_eq!(failed.status, 503, "{}", failed.body);
    assert!(failed.json()["error"]
        .as_str()
        .unwrap()
        .contains("the client keeps its state"));
    // Nor is the failure policy's answer shown as the client's state.
    let unknown = http(b.admin.unwrap(), "GET", path, &[], "");
    assert_eq!(unknown.status, 503, "{}", unknown.body);
    assert!(unknown.json()["error"]
        .as_str()
        .unwrap()
        .contains("the client's state is unknown"));
}

#[test]
fn a_client_one_server_limited_is_listed_by_the_other() {
    let redis = RedisServer::start();
    let url = redis.url();
    let args = admin_on_redis(&url, "listing");
    let a = Server::start(RULES, &args, &[]);
    let b = Server::start_on(&a.rules, &args, &[]);
    let body = |account: &str| {
        format!(
            r#"{{"domain":"fleet","descriptors":[{{"entries":[{{"key":"account","value":"{account}"}}]}}]}}"#
        )
    };
    for _ in 0..21 {
        http(a.http, "POST", "/v1/check", &[], &body("acct_1"));
    }
    assert_eq!(
        http(a.http, "POST", "/v1/check", &[], &body("acct_2")).status,
        200
    );
    // b denied no one: Redis' keys tell it who is limited.
    let listed = http(
        b.admin.unwrap(),
        "GET",
        "/v1/clients?limited&max=10",
        &[],
        "",
    );
    assert_eq!(listed.status, 200, "{}", listed.body);
    let json = listed.json();
    assert_eq!(json["complete"], true, "{json}");
    let clients = json["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 1, "{json}");
    assert_eq!(clients[0]["domain"], "fleet");
    assert_eq!(clients[0]["entries"][0]["value"], "acct_1");
    assert_eq!(clients[0]["tiers"][0]["remaining"], 0);
    assert_eq!(clients[0]["tiers"][0]["quota"], 20);
    // A Redis that does not answer is the operator's 503, not an empty list.
    drop(redis);
    let failed = http(b.admin.unwrap(), "GET", "/v1/clients?limited", &[], "");
    assert_eq!(failed.status, 503, "{}", failed.body);
    assert!(failed.json()["error"]
        .as_str()
        .unwrap()
        .contains("the limited clients are unknown"));
}

/// A call Envoy gives up on while Redis is slow (its rate limit timeout) is still decided
/// whole: the charge, sent to Redis, is taken once Redis answers, and so is the call's
/// negative hits' refund (it was dropped with the call, the permits given back lost), and
/// the call is counted `cancelled` (it was counted nowhere).
#[test]
fn a_call_its_caller_gives_up_on_is_decided_whole() {
    let redis = RedisServer::start();
    let url = redis.url();
    let args = admin_on_redis(&url, "gone");
    let server = Server::start(RULES, &args, &[]);
    let admin = server.admin.unwrap();
    let remaining = |account: &str| {
        let path = format!("/v1/clients/fleet?account={account}");
        http(admin, "GET", &path, &[], "").json()["status"]["remaining"].clone()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = server.client().await;
        let spent = request("fleet", vec![descriptor(&[("account", "acct_b")])], 2);
        client.should_rate_limit(spent).await.unwrap();
        let paused = redis.pause_writes().unwrap();
        let mut refund = descriptor(&[("account", "acct_b")]);
        refund.is_negative_hits = true;
        let call = request(
            "fleet",
            vec![descriptor(&[("account", "acct_a")]), refund],
            1,
        );
        let waiting = client.should_rate_limit(call);
        let given_up = tokio::time::timeout(std::time::Duration::from_millis(100), waiting).await;
        assert!(given_up.is_err(), "a call on a paused Redis cannot answer");
        // The client's cancel on its way to the server (under the store's 250 ms timeout).
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        paused.unpause().unwrap();
    });
    let start = std::time::Instant::now();
    while remaining("acct_a") != 19 || remaining("acct_b") != 19 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "acct_a {}, acct_b {}",
            remaining("acct_a"),
            remaining("acct_b")
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let metrics = http(server.http, "GET", "/metrics", &[], "").body;
    assert!(
        metrics.contains(r#"tollgate_server_requests_total{api="grpc",code="cancelled"} 1"#),
        "{metrics}"
    );
}

/// `tollgate-server --publish` with `args`: its exit status and what it printed.
fn publish(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate-server"))
        .args(args)
        .arg("--publish")
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}

/// The account's limit a server answers with (a check of `acct_7`, over HTTP).
fn account_limit(server: &Server) -> serde_json::Value {
    let body =
        r#"{"domain":"fleet","descriptors":[{"entries":[{"key":"account","value":"acct_7"}]}]}"#;
    let answer = http(server.http, "POST", "/v1/check", &[], body).json();
    answer["statuses"][0]["limit"]["requests_per_unit"].clone()
}

/// Waits (at most 20 s) until `server` runs fleet version `version`.
fn wait_for_fleet_version(server: &Server, version: u64) {
    let start = std::time::Instant::now();
    loop {
        let rules = http(server.admin.unwrap(), "GET", "/v1/rules", &[], "").json();
        if rules["fleet"]["version"] == version {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "{rules}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The operator's one command reaches every server following the fleet's rules, and a
/// server started later; a config that does not load is refused before it reaches any.
#[test]
fn one_publish_reaches_every_server() {
    let redis = RedisServer::start();
    let url = redis.url();
    let follow = [
        "--redis",
        url.as_str(),
        "--redis-prefix",
        "fr",
        "--fleet-rules",
        "--admin",
        "127.0.0.1:0",
    ];
    let a = Server::start(RULES, &follow, &[]);
    let b = Server::start_on(&a.rules, &follow, &[]);
    for server in [&a, &b] {
        assert_eq!(account_limit(server), 20);
        let rules = http(server.admin.unwrap(), "GET", "/v1/rules", &[], "").json();
        assert_eq!(
            rules["fleet"]["version"],
            serde_json::Value::Null,
            "{rules}"
        );
    }
    // The operator raises the account to 50, once.
    let dir = support::temp_dir();
    let raised = dir.join("raised.yaml");
    std::fs::write(
        &raised,
        RULES.replace("requests_per_unit: 20", "requests_per_unit: 50"),
    )
    .unwrap();
    let target = [
        "--config",
        raised.to_str().unwrap(),
        "--redis",
        url.as_str(),
        "--redis-prefix",
        "fr",
    ];
    let (ok, said) = publish(&target);
    assert!(ok, "{said}");
    assert!(said.contains("published version 1"), "{said}");
    for server in [&a, &b] {
        wait_for_fleet_version(server, 1);
        assert_eq!(account_limit(server), 50);
        assert!(server.log().contains("the fleet's published rules"));
    }
    // A server started now runs the published rules, not its file's.
    let c = Server::start_on(&a.rules, &follow, &[]);
    wait_for_fleet_version(&c, 1);
    assert_eq!(account_limit(&c), 50);
    // A config that does not load is refused by the command, and reaches no server.
    let broken = dir.join("broken.yaml");
    std::fs::write(
        &broken,
        "domain: fleet\ndescriptors:\n  - key: account\n    rate_limit: { unit: year }\n",
    )
    .unwrap();
    let (ok, said) = publish(&[
        "--config",
        broken.to_str().unwrap(),
        "--redis",
        url.as_str(),
        "--redis-prefix",
        "fr",
    ]);
    assert!(!ok);
    assert!(said.contains("nothing published"), "{said}");
    assert!(said.contains("rate_limit"), "{said}");
    // The file is not the rules' source any more: a reload of it is refused, saying why.
    let reload = http(a.admin.unwrap(), "POST", "/v1/reload", &[], "");
    assert_eq!(reload.status, 409, "{}", reload.body);
    assert!(reload.json()["error"]
        .as_str()
        .unwrap()
        .contains("--publish"));
    assert_eq!(account_limit(&a), 50);
}

/// A file the server loads is published as it is, a header comment above YAML's `---`
/// document marker included (the published stream is split at `---` lines, and the
/// comment alone was taken for a document without a domain: "nothing published").
#[test]
fn a_config_with_a_comment_above_its_document_marker_is_published() {
    let redis = RedisServer::start();
    let url = redis.url();
    let follow = [
        "--redis",
        url.as_str(),
        "--redis-prefix",
        "hc",
        "--fleet-rules",
        "--admin",
        "127.0.0.1:0",
    ];
    let server = Server::start(RULES, &follow, &[]);
    let dir = support::temp_dir();
    let headed = dir.join("headed.yaml");
    let text = format!(
        "# The fleet's limits.\n---{}",
        RULES.replace("requests_per_unit: 20", "requests_per_unit: 40")
    );
    std::fs::write(&headed, text).unwrap();
    let (ok, said) = publish(&[
        "--config",
        headed.to_str().unwrap(),
        "--redis",
        url.as_str(),
        "--redis-prefix",
        "hc",
    ]);
    assert!(ok, "{said}");
    wait_for_fleet_version(&server, 1);
    assert_eq!(account_limit(&server), 40);
}

/// Two servers on a 3-master Redis Cluster: a call's descriptors are several clients'
/// keys on several masters, decided all or nothing all the same (each master's part in a
/// call of its own; a part that denies has the others give back what they took).
#[test]
fn two_servers_on_a_cluster_decide_calls_across_masters_all_or_nothing() {
    let cluster = redis_server::RedisCluster::start();
    let urls = cluster.urls().join(",");
    let args = ["--redis-cluster", urls.as_str(), "--redis-prefix", "cl"];
    let a = Server::start(RULES, &args, &[]);
    let b = Server::start_on(&a.rules, &args, &[]);
    // The server's client key of a descriptor (config/client.rs), as a hash tag.
    let tag =
        |key: &str, value: &str| format!("{{5:fleet{}:{key}{}:{value}}}", key.len(), value.len());
    let account = cluster.owner(&tag("account", "acct_123"));
    let org = (0..100)
        .map(|i| format!("org{i}"))
        .find(|org| cluster.owner(&tag("org", org)) != account)
        .unwrap();
    for server in [&a, &b] {
        assert_eq!(http(server.http, "GET", "/readyz", &[], "").status, 200);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (mut ca, mut cb) = (a.client().await, b.client().await);
        let mut admitted = 0;
        for i in 0..24 {
            let client = if i % 2 == 0 { &mut ca } else { &mut cb };
            let call = request("fleet", vec![descriptor(&[("account", "acct_123")])], 1);
            if client
                .should_rate_limit(call)
                .await
                .unwrap()
                .into_inner()
                .overall_code
                == 1
            {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 20);
        // The account is spent: a call with the org (on another master) is denied, and
        // the org keeps its permit, on either server.
        let both = request(
            "fleet",
            vec![
                descriptor(&[("org", org.as_str())]),
                descriptor(&[("account", "acct_123")]),
            ],
            1,
        );
        let denied = ca.should_rate_limit(both).await.unwrap().into_inner();
        assert_eq!(
            summary(&denied),
            (2, vec![(1, 30, Some(30)), (2, 0, Some(20))])
        );
        let alone = request("fleet", vec![descriptor(&[("org", org.as_str())])], 1);
        let answer = cb.should_rate_limit(alone).await.unwrap().into_inner();
        assert_eq!(summary(&answer), (1, vec![(1, 29, Some(30))]));
        // Two clients on two masters admitted together.
        let other = request(
            "fleet",
            vec![
                descriptor(&[("org", org.as_str())]),
                descriptor(&[("account", "acct_9")]),
            ],
            1,
        );
        let answer = ca.should_rate_limit(other).await.unwrap().into_inner();
        assert_eq!(
            summary(&answer),
            (1, vec![(1, 28, Some(30)), (1, 19, Some(20))])
        );
    });
    let metrics = http(a.http, "GET", "/metrics", &[], "").body;
    assert!(
        !metrics.contains("tollgate_redis_failures_total"),
        "nothing answered by the failure policy:\n{metrics}"
    );
}

/// A server serving a hot descriptor from leases gives what it holds back to Redis when
/// it stops: another server then finds exactly the permits the calls took used.
#[test]
fn a_stop_gives_the_leases_back() {
    const HOT: &str = r#"
domain: lease
descriptors:
  - key: hot
    rate_limit:
      unit: year
      requests_per_unit: 100000
"#;
    let redis = RedisServer::start();
    let url = redis.url();
    let plain = ["--redis", url.as_str(), "--redis-prefix", "ls"];
    let leased = [
        &plain[..],
        &[
            "--leases",
            "--lease-hot-rate",
            "10",
            "--shutdown-grace",
            "1s",
        ],
    ]
    .concat();
    let server = Server::start(HOT, &leased, &[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let calls = 3_000;
    runtime.block_on(async {
        let mut client = server.client().await;
        for _ in 0..calls {
            let call = request("lease", vec![descriptor(&[("hot", "x")])], 1);
            let answer = client.should_rate_limit(call).await.unwrap().into_inner();
            assert_eq!(answer.overall_code, 1);
        }
    });
    let metrics = http(server.http, "GET", "/metrics", &[], "").body;
    let leases: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_lease_leases_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(leases > 0, "the descriptor was leased:\n{metrics}");
    drop(runtime); // closes the client's connection
    let (status, log) = server.stop();
    assert!(status.success(), "{log}");
    // What Redis counts now is what the calls took: nothing held by the stopped server.
    let other = Server::start(HOT, &plain, &[]);
    let body = r#"{"domain":"lease","descriptors":[{"entries":[{"key":"hot","value":"x"}]}]}"#;
    let answer = http(other.http, "POST", "/v1/check", &[], body).json();
    assert_eq!(
        answer["statuses"][0]["remaining"],
        100_000 - calls - 1,
        "{answer}"
    );
}

#[test]
fn a_server_whose_redis_does_not_answer_is_not_ready() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    redis.kill();
    let server = Server::start(RULES, &["--redis", url.as_str()], &[]);
    assert_eq!(http(server.http, "GET", "/readyz", &[], "").status, 503);
    assert_eq!(http(server.http, "GET", "/healthz", &[], "").status, 200);
}
