//! `http_instr`: one contender of the `http` bench in a plain loop, for counting
//! instructions per request under callgrind, free of timing noise.
//!
//! ```text
//! cargo build --release -p tollgate-bench --features http --bin http_instr
//! valgrind --tool=callgrind --toggle-collect='*http_instr*timed*' \
//!     target/release/http_instr tollgate 100000
//! ```
//!
//! Arguments: the contender — `none` (the request and the handler alone: subtract it),
//! `tollgate` (draft-11 headers), `tollgate-legacy`, `tollgate-no-headers`, `governor`,
//! `governor-headers`, `tollgate-deny`, `governor-deny` — and how many timed requests
//! (after two untimed rounds over every client, so every key is resident). Divide the
//! instructions callgrind collects by the number of requests.

use std::hint::black_box;
use std::process::ExitCode;

use axum::body::Body;
use http::{Request, Response};
use tollgate_bench::http_cases::{self, call_once, Handler, KEYS};
use tollgate_http::HeaderStyle;
use tower_service::Service;

/// `n` requests (the loop callgrind counts: `--toggle-collect='*timed*'`).
#[inline(never)]
fn timed<S, B>(service: &mut S, n: u32) -> u64
where
    S: Service<Request<Body>, Response = Response<B>>,
{
    let mut statuses = 0u64;
    for i in 0..n {
        statuses += u64::from(call_once(service, black_box(i)));
    }
    statuses
}

/// Two untimed rounds over every client, then `n` timed requests; the sum of statuses.
fn run<S, B>(mut service: S, n: u32) -> u64
where
    S: Service<Request<Body>, Response = Response<B>>,
{
    for i in 0..2 * KEYS {
        call_once(&mut service, i);
    }
    timed(&mut service, n)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let contender = args.next().unwrap_or_default();
    let n = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let statuses = match contender.as_str() {
        "none" => run(Handler, n),
        "tollgate" => run(http_cases::tollgate(HeaderStyle::Draft11), n),
        "tollgate-legacy" => run(http_cases::tollgate(HeaderStyle::Legacy), n),
        "tollgate-no-headers" => run(http_cases::tollgate(HeaderStyle::None), n),
        "governor" => run(http_cases::governor(), n),
        "governor-headers" => run(http_cases::governor_headers(), n),
        "tollgate-deny" => run(http_cases::tollgate_denying(), n),
        "governor-deny" => run(http_cases::governor_denying(), n),
        other => {
            eprintln!(
                "unknown contender {other:?}: none, tollgate, tollgate-legacy, \
                 tollgate-no-headers, governor, governor-headers, tollgate-deny, governor-deny"
            );
            return ExitCode::FAILURE;
        }
    };
    println!("{contender}: {n} requests, statuses summing to {statuses}");
    ExitCode::SUCCESS
}
