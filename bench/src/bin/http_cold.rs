//! `http_cold`: the HTTP layer's in-process call as a busy server makes it — after other
//! work has pushed the layer's data out of the core's own caches. Before each timed call a
//! buffer (4 MiB by default: more than this host's L2, less than its L3) is written a line
//! at a time, so what the call reads comes from the shared cache, as it does for a layer
//! between requests of a server that does anything else. Only the call is timed (one
//! `Instant` pair per call, the same for every contender).
//!
//! The warm-cache benches (`http_compare`, `http_instr`) count what a layer executes; this
//! one what it fetches: the number of cache lines it touches, and how many of them wait on
//! one another.
//!
//! ```text
//! cargo run --release -p tollgate-bench --features http --bin http_cold [rounds] [MiB]
//! ```
//!
//! Contenders: no limiter, `tower_governor` with and without its headers, tollgate's
//! layer with draft-11 headers and without. Each round runs 2 000 calls of every contender,
//! in turns (the order rotating), and takes each one's median; the report is the median of
//! the rounds' medians, and the difference to no limiter.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use axum::body::Body;
use http::{Request, Response};
use tollgate_bench::http_cases::{self, call_once, Handler, KEYS};
use tollgate_http::HeaderStyle;
use tower_service::Service;

/// Calls per contender per round.
const CALLS: u32 = 2_000;

/// A runner of `CALLS` cold calls, given the buffer to write before each, answering their
/// median (ns).
type Runner = Box<dyn FnMut(&mut [u8]) -> u64>;

/// One contender: its name and its runner.
type Contender = (&'static str, Runner);

/// A runner of cold calls of `service` (see the module docs), every client called twice
/// first, so every key is resident.
fn runner<S, B>(mut service: S) -> Runner
where
    S: Service<Request<Body>, Response = Response<B>> + 'static,
{
    for i in 0..2 * KEYS {
        call_once(&mut service, i);
    }
    let mut i = 0u32;
    Box::new(move |buffer: &mut [u8]| {
        let mut times = Vec::with_capacity(CALLS as usize);
        for _ in 0..CALLS {
            for line in buffer.chunks_mut(64) {
                line[0] = line[0].wrapping_add(1);
            }
            black_box(&mut *buffer);
            i = i.wrapping_add(1);
            let start = Instant::now();
            black_box(call_once(&mut service, black_box(i)));
            times.push(start.elapsed().as_nanos() as u64);
        }
        median(&mut times)
    })
}

/// The median of `values` (sorts them).
fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

/// The next argument as a count above zero, `default` if there is none; `None` if it is
/// not one.
fn count(arg: Option<String>, default: usize) -> Option<usize> {
    match arg.map(|a| a.parse()) {
        None => Some(default),
        Some(Ok(n)) if n > 0 => Some(n),
        Some(_) => None,
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(rounds), Some(mib)) = (count(args.next(), 15), count(args.next(), 4)) else {
        eprintln!("usage: http_cold [rounds > 0] [MiB written before each call > 0]");
        return ExitCode::from(2);
    };
    let mut buffer = vec![0u8; mib << 20];
    let mut contenders: Vec<Contender> = vec![
        ("none", runner(Handler)),
        (
            "tollgate_draft11",
            runner(http_cases::tollgate(HeaderStyle::Draft11)),
        ),
        ("governor_headers", runner(http_cases::governor_headers())),
        (
            "tollgate_no_headers",
            runner(http_cases::tollgate(HeaderStyle::None)),
        ),
        ("governor", runner(http_cases::governor())),
    ];
    let mut medians = vec![Vec::with_capacity(rounds); contenders.len()];
    for round in 0..rounds {
        for k in 0..contenders.len() {
            let c = (round + k) % contenders.len();
            medians[c].push((contenders[c].1)(&mut buffer));
        }
    }
    println!(
        "cold calls ({mib} MiB written before each): median of {rounds} rounds' medians of \
         {CALLS} calls"
    );
    let mut base = None;
    for ((name, _), m) in contenders.iter().zip(&mut medians) {
        let ns = median(m);
        let delta = base.map_or(String::new(), |b: u64| {
            // Signed: a contender may come out faster than no limiter in a noisy run.
            format!("  ({:+} ns)", i128::from(ns) - i128::from(b))
        });
        println!("{name:<22} {ns:>6} ns{delta}");
        base.get_or_insert(ns);
    }
    ExitCode::SUCCESS
}
