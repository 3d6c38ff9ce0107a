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
//!
//! A third argument, `cold`, writes a line of every 64 bytes of an 8 MiB buffer before each
//! timed request, so each starts with the caches as a busy server leaves them: what the
//! request touches is read from memory. Under cachegrind, the last-level data misses per
//! request (minus `none`'s, and minus the buffer's 131 072) count the cache lines a layer
//! touches:
//!
//! ```text
//! valgrind --tool=cachegrind --cache-sim=yes --LL=1048576,16,64 \
//!     target/release/http_instr tollgate 400 cold     # and 200: divide the difference by 200
//! ```

use std::hint::black_box;
use std::process::ExitCode;

use axum::body::Body;
use http::{Request, Response};
use tollgate_bench::http_cases::{self, call_once, Handler, KEYS};
use tollgate_http::HeaderStyle;
use tower_service::Service;

/// `n` requests (the loop callgrind counts: `--toggle-collect='*timed*'`), each after
/// `evict` if given (see the module docs).
#[inline(never)]
fn timed<S, B>(service: &mut S, n: u32, mut evict: Option<&mut [u8]>) -> u64
where
    S: Service<Request<Body>, Response = Response<B>>,
{
    let mut statuses = 0u64;
    for i in 0..n {
        if let Some(buffer) = evict.as_deref_mut() {
            for line in buffer.chunks_mut(64) {
                line[0] = line[0].wrapping_add(1);
            }
            black_box(&mut *buffer);
        }
        statuses += u64::from(call_once(service, black_box(i)));
    }
    statuses
}

/// Two untimed rounds over every client, then `n` timed requests (each from a cold cache
/// if `cold`); the sum of statuses.
fn run<S, B>(mut service: S, n: u32, cold: bool) -> u64
where
    S: Service<Request<Body>, Response = Response<B>>,
{
    for i in 0..2 * KEYS {
        call_once(&mut service, i);
    }
    let mut buffer = cold.then(|| vec![0u8; 8 << 20]);
    timed(&mut service, n, buffer.as_deref_mut())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let contender = args.next().unwrap_or_default();
    let n = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let cold = match args.next().as_deref() {
        None => false,
        Some("cold") => true,
        Some(other) => {
            eprintln!("unknown argument {other:?}: the third argument is `cold` or nothing");
            return ExitCode::FAILURE;
        }
    };
    let statuses = match contender.as_str() {
        "none" => run(Handler, n, cold),
        "tollgate" => run(http_cases::tollgate(HeaderStyle::Draft11), n, cold),
        "tollgate-legacy" => run(http_cases::tollgate(HeaderStyle::Legacy), n, cold),
        "tollgate-no-headers" => run(http_cases::tollgate(HeaderStyle::None), n, cold),
        "governor" => run(http_cases::governor(), n, cold),
        "governor-headers" => run(http_cases::governor_headers(), n, cold),
        "tollgate-deny" => run(http_cases::tollgate_denying(), n, cold),
        "governor-deny" => run(http_cases::governor_denying(), n, cold),
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
