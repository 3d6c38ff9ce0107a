//! `http_compare`: the HTTP layer's in-process cases (`tollgate_bench::http_cases::specs`)
//! run as `compare` runs its own — tollgate's layer, `tower_governor`'s and no limiter (the
//! floor) timed in turns over several rounds, medians per call — so that a slow phase of
//! the host falls on every contender alike, which one criterion group after another does
//! not. Its own binary: `compare`'s allocator counts every allocation, which would add the
//! same cost to every call here and pull the ratios towards 1.
//!
//! ```text
//! cargo run --release -p tollgate-bench --features http --bin http_compare -- [--quick] [--markdown]
//! ```

use std::process::ExitCode;

use tollgate_bench::{Report, Scale, Schedule};

fn main() -> ExitCode {
    let (mut quick, mut markdown) = (false, false);
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--quick" => quick = true,
            "--markdown" => markdown = true,
            other => {
                eprintln!("unknown argument {other:?}: usage: http_compare [--quick] [--markdown]");
                return ExitCode::from(2);
            }
        }
    }
    let schedule = if quick {
        Schedule::quick()
    } else {
        Schedule::full()
    };
    let scale = Scale::standard();
    let mut report = Report::default();
    for spec in tollgate_bench::http_cases::specs() {
        report.rows.push((spec.build)(&scale).measure(schedule));
    }
    println!("{}", report.table());
    if markdown {
        println!("{}", report.markdown());
    }
    ExitCode::SUCCESS
}
