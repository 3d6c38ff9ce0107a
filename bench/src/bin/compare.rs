//! `compare`: runs every benchmark case in one process — tollgate, governor and the floor
//! interleaved over several rounds — and prints medians and ratios.
//!
//! ```text
//! cargo run --release -p tollgate-bench --bin compare -- [--quick] [--json FILE] [--filter SUBSTR] [--markdown] [--wall]
//! ```
//!
//! - `--quick`: fewer, shorter rounds (the whole run stays under two minutes);
//! - `--json FILE`: also write `{"cases":[{"name","unit","tollgate","governor","floor"}, …]}`;
//! - `--filter SUBSTR`: only cases whose name contains `SUBSTR`;
//! - `--markdown`: also print the table as markdown (for docs/benchmarks.md);
//! - `--wall`: time batches by wall clock instead of the measuring thread's CPU time (the
//!   default, which keeps other processes on a shared machine out of the figures).

use std::process::ExitCode;
use std::time::Instant;
use tollgate_bench::{CountingAllocator, Report, Scale, Schedule, Stopwatch, TimeSource};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator::new();

struct Args {
    quick: bool,
    json: Option<String>,
    filter: Option<String>,
    markdown: bool,
    wall: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        quick: false,
        json: None,
        filter: None,
        markdown: false,
        wall: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--markdown" => args.markdown = true,
            "--wall" => args.wall = true,
            "--json" => args.json = Some(it.next().ok_or("--json needs a file name")?),
            "--filter" => args.filter = Some(it.next().ok_or("--filter needs a substring")?),
            "-h" | "--help" => return Err(
                "usage: compare [--quick] [--json FILE] [--filter SUBSTR] [--markdown] [--wall]"
                    .into(),
            ),
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let schedule = if args.quick {
        Schedule::quick()
    } else {
        Schedule::full()
    };
    let scale = Scale::standard();
    Stopwatch::set_source(if args.wall {
        TimeSource::Wall
    } else {
        TimeSource::ThreadCpu
    });
    let wanted = |name: &str| args.filter.as_deref().is_none_or(|f| name.contains(f));
    let started = Instant::now();
    let mut report = Report::default();
    for spec in tollgate_bench::timed_specs() {
        if !wanted(spec.name) {
            continue;
        }
        let case_started = Instant::now();
        let case = (spec.build)(&scale);
        let row = case.measure(schedule);
        eprintln!(
            "{:<40} {:>6.1} s",
            row.name,
            case_started.elapsed().as_secs_f64()
        );
        report.rows.push(row);
    }
    for spec in tollgate_bench::latency_specs() {
        if !wanted(spec.name) {
            continue;
        }
        let case_started = Instant::now();
        let rows = (spec.measure)(&scale, schedule);
        eprintln!(
            "{:<40} {:>6.1} s",
            spec.name,
            case_started.elapsed().as_secs_f64()
        );
        report.rows.extend(rows);
    }
    for spec in tollgate_bench::memory_specs() {
        if !wanted(spec.name) {
            continue;
        }
        let case_started = Instant::now();
        let rows = (spec.measure)(&scale, &ALLOCATOR);
        eprintln!(
            "{:<40} {:>6.1} s",
            spec.name,
            case_started.elapsed().as_secs_f64()
        );
        report.rows.extend(rows);
    }
    println!("{}", report.table());
    if args.markdown {
        println!("{}", report.markdown());
    }
    eprintln!("total {:.1} s", started.elapsed().as_secs_f64());
    if let Some(path) = args.json {
        if let Err(error) = std::fs::write(&path, report.json() + "\n") {
            eprintln!("cannot write {path}: {error}");
            return ExitCode::FAILURE;
        }
        eprintln!("wrote {path}");
    }
    ExitCode::SUCCESS
}
