//! Envoy's Rate Limit Service as Envoy calls it: a tonic client built from Envoy's protos
//! sends `ShouldRateLimit` sequences to the real `tollgate-server` binary on loopback, and
//! every code, status and header is asserted: value and key-only descriptors, nested ones,
//! several descriptors decided all or nothing, `hits_addend`, `unlimited`, a blocklist,
//! `shadow_mode`, `replaces`, negative hits, refusals; a reload on SIGHUP, and a refused
//! one that keeps the old rules.

mod support;

use support::{descriptor, request, summary, Server};

/// Codes of the protocol.
const OK: i32 = 1;
const OVER: i32 = 2;

/// Envoy ratelimit's README examples, in their shape (a database and a nested remote
/// address and path), with windows long enough (a year) that none turns over in a test.
const RULES: &str = r#"
domain: edge
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: year
      requests_per_unit: 3
  - key: database
    rate_limit:
      unit: year
      requests_per_unit: 5
  - key: remote_address
    rate_limit:
      unit: year
      requests_per_unit: 10
    descriptors:
      - key: path
        value: /login
        rate_limit:
          name: login
          unit: year
          requests_per_unit: 2
  - key: internal
    rate_limit:
      unlimited: true
  - key: banned
    rate_limit:
      unit: year
      requests_per_unit: 0
  - key: trial
    shadow_mode: true
    rate_limit:
      unit: year
      requests_per_unit: 1
  - key: partner
    rate_limit:
      replaces:
        - name: login
      unit: year
      requests_per_unit: 100
"#;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn envoy_sequences_get_the_exact_codes_and_statuses() {
    let server = Server::start(RULES, &[], &[]);
    runtime().block_on(async {
        let client = server.client().await;
        let ask = |descriptors: Vec<_>, hits: u32| {
            let call = request("edge", descriptors, hits);
            let mut client = client.clone();
            async move { summary(&client.should_rate_limit(call).await.unwrap().into_inner()) }
        };
        let users = || descriptor(&[("database", "users")]);
        // A value's own limit: 3, then over; hits_addend 0 counts 1.
        for remaining in [2, 1, 0] {
            assert_eq!(
                ask(vec![users()], 0).await,
                (OK, vec![(OK, remaining, Some(3))])
            );
        }
        assert_eq!(
            ask(vec![users()], 1).await,
            (OVER, vec![(OVER, 0, Some(3))])
        );
        // A key-only node: each value its own 5; hits_addend 4.
        assert_eq!(
            ask(vec![descriptor(&[("database", "orders")])], 4).await,
            (OK, vec![(OK, 1, Some(5))])
        );
        assert_eq!(
            ask(vec![descriptor(&[("database", "items")])], 1).await,
            (OK, vec![(OK, 4, Some(5))])
        );
        // No node: OK, no limit, 0 remaining (as Envoy ratelimit answers); deeper than
        // the tree: no node either.
        assert_eq!(
            ask(vec![descriptor(&[("color", "red")])], 1).await,
            (OK, vec![(OK, 0, None)])
        );
        assert_eq!(
            ask(
                vec![descriptor(&[("database", "users"), ("table", "t")])],
                1
            )
            .await,
            (OK, vec![(OK, 0, None)])
        );
        // Nested: the address's own 10 and, with the path, the login's 2.
        let login = || descriptor(&[("remote_address", "10.0.0.1"), ("path", "/login")]);
        let address = || descriptor(&[("remote_address", "10.0.0.1")]);
        assert_eq!(
            ask(vec![address(), login()], 1).await,
            (OK, vec![(OK, 9, Some(10)), (OK, 1, Some(2))])
        );
        assert_eq!(
            ask(vec![address(), login()], 1).await,
            (OK, vec![(OK, 8, Some(10)), (OK, 0, Some(2))])
        );
        // All or nothing: the login is spent, so the address's permit is not taken.
        assert_eq!(
            ask(vec![address(), login()], 1).await,
            (OVER, vec![(OK, 8, Some(10)), (OVER, 0, Some(2))])
        );
        assert_eq!(ask(vec![address()], 1).await, (OK, vec![(OK, 7, Some(10))]));
        // Unlimited: OK with everything remaining; banned: over for any cost.
        assert_eq!(
            ask(vec![descriptor(&[("internal", "job")])], 1000).await,
            (OK, vec![(OK, u32::MAX, None)])
        );
        assert_eq!(
            ask(vec![descriptor(&[("banned", "x")])], 1).await,
            (OVER, vec![(OVER, 0, Some(0))])
        );
        // Shadow mode: over its 1 after the first, reported OK, never denying.
        let trial = || descriptor(&[("trial", "t1")]);
        assert_eq!(ask(vec![trial()], 1).await, (OK, vec![(OK, 0, Some(1))]));
        assert_eq!(ask(vec![trial()], 1).await, (OK, vec![(OK, 0, Some(1))]));
        // Replaces: with a partner descriptor the login limit does not apply.
        let partner = || descriptor(&[("partner", "p1")]);
        assert_eq!(
            ask(vec![partner(), login()], 1).await,
            (OK, vec![(OK, 99, Some(100)), (OK, 0, None)])
        );
        // Negative hits give back: the spent login has one again.
        let mut refund = login();
        refund.is_negative_hits = true;
        assert_eq!(ask(vec![refund], 1).await.0, OK);
        assert_eq!(ask(vec![login()], 1).await, (OK, vec![(OK, 0, Some(2))]));
    });
}

#[test]
fn a_malformed_request_is_invalid_argument() {
    let server = Server::start(RULES, &[], &[]);
    runtime().block_on(async {
        let mut client = server.client().await;
        let refused = |call| {
            let mut client = client.clone();
            async move { client.should_rate_limit(call).await.unwrap_err() }
        };
        let status = refused(request("", vec![descriptor(&[("database", "users")])], 1)).await;
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), "rate limit domain must not be empty");
        let status = refused(request("edge", vec![], 1)).await;
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "rate limit descriptor list must not be empty"
        );
        let status = refused(request("edge", vec![descriptor(&[])], 1)).await;
        assert_eq!(status.message(), "descriptors[0]: no entries");
        let mut overridden = descriptor(&[("database", "users")]);
        overridden.limit = Some(Default::default());
        let status = refused(request("edge", vec![overridden], 1)).await;
        assert_eq!(
            status.message(),
            "descriptors[].limit (a limit override): not supported by tollgate-server"
        );
        // Nine limited descriptors are more than one decision holds.
        let many = (0..9)
            .map(|i| descriptor(&[("database", &format!("db{i}"))]))
            .collect();
        let status = refused(request("edge", many, 1)).await;
        assert_eq!(
            status.message(),
            "9 limited descriptors match more than the 8 limits one decision holds"
        );
        // The client still works after every refusal.
        let fine = client
            .should_rate_limit(request(
                "edge",
                vec![descriptor(&[("database", "users")])],
                1,
            ))
            .await
            .unwrap();
        assert_eq!(summary(&fine.into_inner()), (OK, vec![(OK, 2, Some(3))]));
    });
}

/// A refused call changes nothing: its negative hits are not given back either.
#[test]
fn a_refused_call_gives_nothing_back() {
    let server = Server::start(RULES, &[], &[]);
    runtime().block_on(async {
        let mut client = server.client().await;
        let orders = || descriptor(&[("database", "orders")]);
        let used = client
            .should_rate_limit(request("edge", vec![orders()], 2))
            .await
            .unwrap();
        assert_eq!(summary(&used.into_inner()), (OK, vec![(OK, 3, Some(5))]));
        let mut refund = orders();
        refund.is_negative_hits = true;
        let mut many: Vec<_> = (0..9)
            .map(|i| descriptor(&[("database", &format!("db{i}"))]))
            .collect();
        many.push(refund);
        let status = client
            .should_rate_limit(request("edge", many, 1))
            .await
            .unwrap_err();
        assert_eq!(
            status.message(),
            "10 limited descriptors match more than the 8 limits one decision holds"
        );
        let after = client
            .should_rate_limit(request("edge", vec![orders()], 1))
            .await
            .unwrap();
        assert_eq!(summary(&after.into_inner()), (OK, vec![(OK, 2, Some(5))]));
    });
}

/// A call refused because its shadow-mode descriptors match more tiers than one decision
/// holds charges its enforced descriptors nothing either (they were decided, and kept
/// their permits, before the shadow ones were refused).
#[test]
fn a_call_refused_for_its_shadow_tiers_charges_nothing() {
    let rules = r#"
domain: edge
descriptors:
  - key: database
    rate_limit:
      unit: year
      requests_per_unit: 5
  - key: trial
    shadow_mode: true
    rate_limit:
      tiers:
        - { limit: 10, window: 1m }
        - { limit: 100, window: 1h }
"#;
    let server = Server::start(rules, &[], &[]);
    runtime().block_on(async {
        let mut client = server.client().await;
        let orders = || descriptor(&[("database", "orders")]);
        // One enforced tier and five shadow descriptors of two tiers each: 10 shadow tiers.
        let mut call = vec![orders()];
        call.extend((0..5).map(|i| descriptor(&[("trial", &format!("t{i}"))])));
        for _ in 0..3 {
            let status = client
                .should_rate_limit(request("edge", call.clone(), 1))
                .await
                .unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
        }
        let after = client
            .should_rate_limit(request("edge", vec![orders()], 1))
            .await
            .unwrap();
        assert_eq!(summary(&after.into_inner()), (OK, vec![(OK, 4, Some(5))]));
    });
}

#[test]
fn response_headers_are_added_when_asked() {
    let server = Server::start(RULES, &["--response-headers"], &[]);
    runtime().block_on(async {
        let mut client = server.client().await;
        let call = || request("edge", vec![descriptor(&[("database", "users")])], 3);
        let admitted = client.should_rate_limit(call()).await.unwrap().into_inner();
        let headers: Vec<(String, String)> = admitted
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect();
        assert_eq!(
            headers[0],
            (
                "RateLimit-Policy".to_owned(),
                r#""edge.database_users";q=3;w=31536000"#.to_owned()
            )
        );
        assert_eq!(headers[1].0, "RateLimit");
        assert!(
            headers[1].1.starts_with(r#""edge.database_users";r=0;t="#),
            "{headers:?}"
        );
        assert_eq!(headers.len(), 2);
        let denied = client.should_rate_limit(call()).await.unwrap().into_inner();
        let names: Vec<&str> = denied
            .response_headers_to_add
            .iter()
            .map(|h| h.key.as_str())
            .collect();
        assert_eq!(names, ["RateLimit-Policy", "RateLimit", "Retry-After"]);
    });
    // Without the flag: none.
    let plain = Server::start(RULES, &[], &[]);
    runtime().block_on(async {
        let mut client = plain.client().await;
        let answer = client
            .should_rate_limit(request(
                "edge",
                vec![descriptor(&[("database", "users")])],
                1,
            ))
            .await
            .unwrap()
            .into_inner();
        assert!(answer.response_headers_to_add.is_empty());
    });
}

/// A descriptor whose cost is more than its limit ever admits is over the limit alone, as
/// in the Go service: the call's other descriptors are under theirs, reported with what
/// they have (untaken, the call being refused whole), and each status says when its
/// window ends. They were all reported over, with 0 remaining and no reset.
#[test]
fn a_cost_beyond_one_limit_leaves_the_others_under_theirs() {
    let rules = r#"
domain: edge
descriptors:
  - key: small
    rate_limit:
      unit: year
      requests_per_unit: 10
  - key: big
    rate_limit:
      unit: year
      requests_per_unit: 100
"#;
    let server = Server::start(rules, &[], &[]);
    runtime().block_on(async {
        let mut client = server.client().await;
        let mut heavy = descriptor(&[("small", "a")]);
        heavy.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 20 });
        let answer = client
            .should_rate_limit(request("edge", vec![heavy, descriptor(&[("big", "b")])], 1))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            summary(&answer),
            (OVER, vec![(OVER, 10, Some(10)), (OK, 100, Some(100))])
        );
        assert!(
            answer
                .statuses
                .iter()
                .all(|s| s.duration_until_reset.is_some()),
            "{answer:?}"
        );
        // Nothing was taken.
        let after = client
            .should_rate_limit(request(
                "edge",
                vec![descriptor(&[("small", "a")]), descriptor(&[("big", "b")])],
                1,
            ))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            summary(&after),
            (OK, vec![(OK, 9, Some(10)), (OK, 99, Some(100))])
        );
        // With a descriptor over its own limit beside it, both are over.
        let spent = client
            .should_rate_limit(request("edge", vec![descriptor(&[("small", "c")])], 10))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(summary(&spent), (OK, vec![(OK, 0, Some(10))]));
        let mut heavy = descriptor(&[("big", "b")]);
        heavy.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 101 });
        let both = client
            .should_rate_limit(request(
                "edge",
                vec![descriptor(&[("small", "c")]), heavy],
                1,
            ))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            summary(&both),
            (OVER, vec![(OVER, 0, Some(10)), (OVER, 99, Some(100))])
        );
    });
}

/// A blocked descriptor (`requests_per_unit: 0`) says when its unit's window ends, as the
/// Go service does: it had no `duration_until_reset`, which Envoy reads as 0.
#[test]
fn a_blocked_descriptor_says_when_its_window_ends() {
    let server = Server::start(RULES, &[], &[]);
    runtime().block_on(async {
        let mut client = server.client().await;
        let answer = client
            .should_rate_limit(request("edge", vec![descriptor(&[("banned", "x")])], 1))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(summary(&answer), (OVER, vec![(OVER, 0, Some(0))]));
        let reset = answer.statuses[0].duration_until_reset.unwrap();
        // The year's window of Unix time, as `unit - now % unit` (a second either way).
        let year = 365 * 86_400;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let expected = i64::try_from(year - now % year).unwrap();
        assert!(
            (reset.seconds - expected).abs() <= 1,
            "{reset:?}, {expected}"
        );
    });
}

/// `duration_until_reset` is whole seconds, rounded up, as the Go service answers
/// (`unit - now % unit`): Envoy reads only its `seconds` into `X-RateLimit-Reset`, so a
/// fraction cut off there said 0 for every per-second limit, and a second early for the
/// others.
#[test]
fn duration_until_reset_is_whole_seconds_rounded_up() {
    let rules = r#"
domain: edge
descriptors:
  - key: per_second
    rate_limit:
      unit: second
      requests_per_unit: 1000
  - key: per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1000
"#;
    let server = Server::start(rules, &[], &[]);
    runtime().block_on(async {
        let mut client = server.client().await;
        for _ in 0..5 {
            let answer = client
                .should_rate_limit(request(
                    "edge",
                    vec![
                        descriptor(&[("per_second", "a")]),
                        descriptor(&[("per_minute", "a")]),
                    ],
                    1,
                ))
                .await
                .unwrap()
                .into_inner();
            let resets: Vec<_> = answer
                .statuses
                .iter()
                .map(|s| s.duration_until_reset.unwrap())
                .collect();
            assert_eq!((resets[0].seconds, resets[0].nanos), (1, 0), "{resets:?}");
            assert!((1..=60).contains(&resets[1].seconds), "{resets:?}");
            assert_eq!(resets[1].nanos, 0, "{resets:?}");
        }
    });
}

#[test]
fn sighup_reloads_the_rules_and_a_broken_file_keeps_the_old_ones() {
    let server = Server::start(RULES, &[], &[]);
    let rt = runtime();
    let users = || request("edge", vec![descriptor(&[("database", "users")])], 1);
    rt.block_on(async {
        let mut client = server.client().await;
        let first = client
            .should_rate_limit(users())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(summary(&first), (OK, vec![(OK, 2, Some(3))]));
    });
    // Raised to 30: the permit used still counts.
    std::fs::write(
        &server.rules,
        RULES.replace("requests_per_unit: 3", "requests_per_unit: 30"),
    )
    .unwrap();
    server.signal("HUP");
    wait_for(|| server.log().contains("rules reloaded"));
    rt.block_on(async {
        let mut client = server.client().await;
        let next = client
            .should_rate_limit(users())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(summary(&next), (OK, vec![(OK, 28, Some(30))]));
    });
    // A file that does not load: refused, logged, the 30 stay.
    std::fs::write(&server.rules, "domain: edge\ndescriptors:\n  - key: database\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n").unwrap();
    server.signal("HUP");
    wait_for(|| server.log().contains("rules reload refused"));
    assert!(server.log().contains("fortnight"), "{}", server.log());
    rt.block_on(async {
        let mut client = server.client().await;
        let next = client
            .should_rate_limit(users())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(summary(&next), (OK, vec![(OK, 27, Some(30))]));
    });
    // The client's connection closed, so the stop need not wait for it.
    drop(rt);
    let (status, log) = server.stop();
    assert!(status.success(), "{log}");
    assert!(log.contains("stopping"), "{log}");
}

/// Waits (up to 30 s) for `condition`.
fn wait_for(condition: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !condition() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "timed out"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
