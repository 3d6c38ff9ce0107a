//! A tour of tollgate: the spec's scenarios run through every algorithm, printing what each
//! admitted, delayed and denied.
//!
//! ```text
//! cargo run --release --example tour
//! cargo run --release --example tour -- --svg DIR
//! ```
//!
//! With `--svg DIR` it also writes one picture per scenario, `DIR/<scenario>.svg`: a panel
//! per algorithm with the requests offered (grey, cumulative), the admitted ones (a dot each
//! at the time it leaves, on the cumulative admitted line; a delayed request has a line from
//! its arrival), the denied ones (red rings) and the limit (dashed: 10 at once plus 10/s, from
//! the first request of each stretch of time shown, above what was admitted before it). Idle
//! gaps of more than 2 whole seconds are cut from the time axis. The SVG is written by hand and byte for byte the same on every run;
//! `scripts/tour-svgs.sh` regenerates the copies under `docs/img/tour/`.

use std::fmt::Write as _;
use tollgate_core::{AlgorithmConfig, AnyLimiter, Decision, Nanos};

/// One arrival: at `at_ms`, a request of cost 1.
type Trace = Vec<u64>;

fn burst_then_idle() -> Trace {
    // 20 requests within one second, 10 s of nothing, then 20 more within one second.
    let burst = |start: u64| (0..20).map(move |i| start + 50 * i);
    burst(0).chain(burst(11_000)).collect()
}

fn boundary_burst() -> Trace {
    // 10 requests in the last millisecond of a window, 10 in the first of the next.
    std::iter::repeat(999)
        .take(10)
        .chain(std::iter::repeat(1_000).take(10))
        .collect()
}

fn steady_overload() -> Trace {
    // 20 requests per second, evenly spaced, for 3 s: twice the configured rate.
    (0..60).map(|i| 50 * i).collect()
}

fn algorithms() -> Vec<(&'static str, AlgorithmConfig)> {
    let second = Nanos::from_secs(1);
    vec![
        (
            "GCRA 10/s, burst 10",
            AlgorithmConfig::Gcra {
                limit: 10,
                period: second,
                burst: 10,
            },
        ),
        (
            "token bucket cap 10, 10/s",
            AlgorithmConfig::TokenBucket {
                capacity: 10,
                refill_amount: 10,
                refill_period: second,
            },
        ),
        (
            "leaky bucket 10/s, queue 5",
            AlgorithmConfig::LeakyBucket {
                amount: 10,
                period: second,
                queue: 5,
            },
        ),
        (
            "fixed window 10/s",
            AlgorithmConfig::FixedWindow {
                limit: 10,
                window: second,
            },
        ),
        (
            "sliding counter 10/s",
            AlgorithmConfig::SlidingWindowCounter {
                limit: 10,
                window: second,
            },
        ),
        (
            "sliding log 10/s",
            AlgorithmConfig::SlidingWindowLog {
                limit: 10,
                window: second,
            },
        ),
    ]
}

#[derive(Default)]
struct Tally {
    admitted: usize,
    delayed: usize,
    denied: usize,
    max_delay: Nanos,
    /// Most admitted within any 1 s sliding window (by departure time for delayed requests).
    peak_per_second: usize,
    /// Every request in trace order: its arrival and, if admitted, its departure (ns).
    marks: Vec<(u64, Option<u64>)>,
}

fn run(config: &AlgorithmConfig, trace: &Trace) -> Tally {
    let limiter = AnyLimiter::<10>::new(config.build().expect("valid config")).expect("ring fits");
    let mut tally = Tally::default();
    let mut departures = Vec::new();
    for &at in trace {
        let now = Nanos::from_millis(at);
        let d: Decision = limiter.check_at(now);
        if d.allowed {
            tally.admitted += 1;
            if d.delay > Nanos::ZERO {
                tally.delayed += 1;
                tally.max_delay = tally.max_delay.max(d.delay);
            }
            departures.push((now + d.delay).as_u64());
            tally
                .marks
                .push((now.as_u64(), Some((now + d.delay).as_u64())));
        } else {
            tally.denied += 1;
            tally.marks.push((now.as_u64(), None));
        }
    }
    departures.sort_unstable();
    for (i, &t) in departures.iter().enumerate() {
        let in_window = departures[i..]
            .iter()
            .take_while(|&&u| u < t + 1_000_000_000)
            .count();
        tally.peak_per_second = tally.peak_per_second.max(in_window);
    }
    tally
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let svg_dir = match args.as_slice() {
        [] => None,
        [flag, dir] if flag == "--svg" => Some(std::path::PathBuf::from(dir)),
        _ => {
            eprintln!("usage: tour [--svg DIR]");
            std::process::exit(2);
        }
    };
    let scenarios: [(&str, &str, Trace); 3] = [
        (
            "burst-then-idle",
            "burst of 20 in 1 s, 10 s idle, burst of 20 again",
            burst_then_idle(),
        ),
        (
            "boundary-burst",
            "10 at 0.999 s + 10 at 1.000 s (window boundary)",
            boundary_burst(),
        ),
        (
            "steady-overload",
            "steady 20/s for 3 s (2x the limit)",
            steady_overload(),
        ),
    ];
    for (slug, title, trace) in &scenarios {
        println!("\n== {title} ({} requests)", trace.len());
        println!(
            "{:<28} {:>8} {:>8} {:>7} {:>10} {:>12}",
            "algorithm", "admitted", "delayed", "denied", "max delay", "peak per 1s"
        );
        let mut panels = Vec::new();
        for (name, config) in algorithms() {
            let t = run(&config, trace);
            println!(
                "{:<28} {:>8} {:>8} {:>7} {:>10} {:>12}",
                name,
                t.admitted,
                t.delayed,
                t.denied,
                format!("{:?}", t.max_delay.as_duration()),
                t.peak_per_second
            );
            panels.push((name, t));
        }
        if let Some(dir) = &svg_dir {
            std::fs::create_dir_all(dir).expect("create the SVG directory");
            let path = dir.join(format!("{slug}.svg"));
            std::fs::write(&path, svg(title, trace.len(), &panels)).expect("write the SVG");
            println!("wrote {}", path.display());
        }
    }
    println!(
        "\nToken bucket and GCRA bank idle time as a burst; the leaky bucket never does (it delays\n\
         to pace output at 10/s); the fixed window lets 2x through across a boundary; the sliding\n\
         counter smooths that; the sliding log is exact: never more than 10 in any 1 s window."
    );
}

// The pictures. Geometry in px; times in ns.
const MS: u64 = 1_000_000;
const WIDTH: f64 = 760.0;
const LEFT: f64 = 200.0; // algorithm names to the left of the plots
const PLOT: f64 = WIDTH - LEFT - 16.0;
const TOP: f64 = 62.0;
const PANEL: f64 = 60.0;
const GAP: f64 = 18.0;
const BREAK: f64 = 24.0; // the width of a cut idle gap
const LIMIT: f64 = 10.0; // the limit every configuration shares: 10 at once, 10/s

/// A number as SVG text: one decimal at most, no trailing ".0" (same bytes every run).
fn n(x: f64) -> String {
    let s = format!("{x:.1}");
    s.strip_suffix(".0").map_or(s.clone(), str::to_string)
}

/// The shown stretches of time `[start, end)` (whole seconds) and where each starts in px.
struct Axis {
    spans: Vec<(u64, u64, f64)>,
    px_per_ns: f64,
}

impl Axis {
    fn new(panels: &[(&str, Tally)]) -> Axis {
        let mut times: Vec<u64> = panels
            .iter()
            .flat_map(|(_, t)| t.marks.iter().flat_map(|&(a, d)| [Some(a), d]).flatten())
            .collect();
        times.sort_unstable();
        let mut spans: Vec<(u64, u64, f64)> = Vec::new();
        for t in times {
            let (start, end) = (
                t / (1000 * MS) * 1000 * MS,
                (t / (1000 * MS) + 1) * 1000 * MS,
            );
            match spans.last_mut() {
                Some(last) if start <= last.1 + 2000 * MS => last.1 = last.1.max(end),
                _ => spans.push((start, end, 0.0)),
            }
        }
        let shown: u64 = spans.iter().map(|s| s.1 - s.0).sum();
        let px_per_ns = (PLOT - BREAK * (spans.len() - 1) as f64) / shown as f64;
        let mut x = LEFT;
        for s in &mut spans {
            s.2 = x;
            x += (s.1 - s.0) as f64 * px_per_ns + BREAK;
        }
        Axis { spans, px_per_ns }
    }

    fn end(&self) -> f64 {
        self.x(self.spans.last().expect("shown").1)
    }

    fn x(&self, t: u64) -> f64 {
        let s = self.spans.iter().rev().find(|s| s.0 <= t).expect("shown");
        s.2 + (t.min(s.1) - s.0) as f64 * self.px_per_ns
    }
}

/// A cumulative step line: 0 before the first time, k after the k-th (times sorted).
fn steps(axis: &Axis, times: &[u64], y: &dyn Fn(f64) -> String) -> String {
    let mut d = format!("M{} {}", n(LEFT), y(0.0));
    for (k, &at) in times.iter().enumerate() {
        let _ = write!(d, "H{}V{}", n(axis.x(at)), y(k as f64 + 1.0));
    }
    d + &format!("H{}", n(axis.end()))
}

/// One scenario as an SVG: a panel per algorithm, cumulative counts over time.
fn svg(title: &str, offered: usize, panels: &[(&str, Tally)]) -> String {
    let axis = Axis::new(panels);
    let bottom = TOP + panels.len() as f64 * (PANEL + GAP) - GAP;
    let (w, h) = (n(WIDTH), n(bottom + 22.0));
    // In a panel (translated to its top): count 0 at the bottom, every request at the top.
    let y = |count: f64| n(PANEL - count.min(offered as f64) / offered as f64 * PANEL);
    let arrivals: Vec<u64> = panels[0].1.marks.iter().map(|m| m.0).collect();
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\" \
         width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" \
         font-size=\"11\" fill=\"#222\">\n\
         <style>path{{fill:none}}.g{{stroke:#e3e3e3}}.o{{stroke:#aaa}}\
         .a{{stroke:#1565c0;stroke-width:1.5}}\
         .p{{stroke:#1565c0;stroke-width:4.5;stroke-linecap:round}}.q{{stroke:#90caf9}}\
         .r{{marker-start:url(#r);marker-mid:url(#r);marker-end:url(#r)}}\
         .l{{stroke:#ef6c00;stroke-dasharray:5 3}}.s{{fill:#666;font-size:10}}</style>\n\
         <defs><marker id=\"r\" markerWidth=\"8\" markerHeight=\"8\" refX=\"4\" refY=\"4\" \
         markerUnits=\"userSpaceOnUse\"><circle cx=\"4\" cy=\"4\" r=\"2.4\" fill=\"#fff\" \
         stroke=\"#d32f2f\" stroke-width=\"1.5\"/></marker>\
         <path id=\"o\" class=\"o\" d=\"{}\"/></defs>\n\
         <rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n\
         <text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{title}</text>\n",
        steps(&axis, &arrivals, &y)
    );
    // The legend.
    o.push_str(
        "<path class=\"o\" d=\"M10 44h16\"/><text x=\"30\" y=\"48\">requests offered</text>\
         <path class=\"p\" d=\"M134 44h0\"/><text x=\"142\" y=\"48\">admitted</text>\
         <path class=\"q\" d=\"M206 44h14\"/><path class=\"p\" d=\"M220 44h0\"/>\
         <text x=\"228\" y=\"48\">delayed to</text><path class=\"r\" d=\"M300 44h0\"/>\
         <text x=\"308\" y=\"48\">denied</text><path class=\"l\" d=\"M362 44h20\"/>\
         <text x=\"386\" y=\"48\">limit: 10 at once + 10/s (counts are cumulative)</text>\n",
    );
    // Window boundaries (every second) through all panels, and the time axis under them.
    for (j, &(start, end, _)) in axis.spans.iter().enumerate() {
        for t in (start..=end).step_by(500 * MS as usize) {
            let x = n(axis.x(t));
            if t % (1000 * MS) == 0 {
                let _ = write!(o, "<path class=\"g\" d=\"M{x} {}V{}\"/>", n(TOP), n(bottom));
            }
            if t == end && j + 1 < axis.spans.len() {
                continue; // the next stretch's first label stands beside it
            }
            let (s, ms) = (t / (1000 * MS), t / MS % 1000);
            let label = if ms == 0 {
                format!("{s} s")
            } else {
                format!("{s}.{} s", ms / 100)
            };
            let _ = write!(
                o,
                "<text x=\"{x}\" y=\"{}\" text-anchor=\"middle\" class=\"s\">{label}</text>",
                n(bottom + 14.0)
            );
        }
    }
    o.push('\n');
    for (i, (name, t)) in panels.iter().enumerate() {
        let top = TOP + i as f64 * (PANEL + GAP);
        let mut lines = vec![format!("{} admitted, {} denied", t.admitted, t.denied)];
        if t.delayed > 0 {
            let max = t.max_delay.as_duration();
            lines.push(format!("{} of them delayed, up to {max:?}", t.delayed));
        }
        lines.push(format!("peak {} in 1 s", t.peak_per_second));
        let _ = write!(
            o,
            "<g transform=\"translate(0 {})\"><text x=\"10\" y=\"11\" font-weight=\"bold\">{name}</text>",
            n(top)
        );
        for (k, line) in lines.iter().enumerate() {
            let _ = write!(
                o,
                "<text x=\"10\" y=\"{}\" class=\"s\">{line}</text>",
                24 + 12 * k
            );
        }
        let _ = writeln!(
            o,
            "<text x=\"{l}\" y=\"8\" class=\"s\" text-anchor=\"end\">{offered}</text>\
             <text x=\"{l}\" y=\"{}\" class=\"s\" text-anchor=\"end\">0</text>\
             <path class=\"g\" d=\"M{} {}H{}\"/><use xlink:href=\"#o\"/>",
            n(PANEL + 3.0),
            n(LEFT),
            y(0.0),
            n(axis.end()),
            l = n(LEFT - 6.0),
        );
        // Admitted, by departure: a cumulative step line.
        let mut admitted: Vec<(u64, u64)> = t
            .marks
            .iter()
            .filter_map(|&(a, d)| d.map(|d| (d, a)))
            .collect();
        admitted.sort_unstable();
        let departures: Vec<u64> = admitted.iter().map(|m| m.0).collect();
        let _ = writeln!(
            o,
            "<path class=\"a\" d=\"{}\"/>",
            steps(&axis, &departures, &y)
        );
        // The limit: from each stretch's first request, 10 at once then 10/s on top of what
        // was admitted before it.
        let mut d = String::new();
        for &(start, end, _) in &axis.spans {
            let Some(&first) = arrivals.iter().find(|&&a| a >= start && a < end) else {
                continue;
            };
            let before = departures.iter().filter(|&&t| t < first).count() as f64;
            let room = offered as f64 - before - LIMIT; // 10/s until the panel's top
            let stop = end.min(first + (room.max(0.0) * 100.0) as u64 * MS);
            let _ = write!(
                d,
                "M{} {}L{} {}",
                n(axis.x(first)),
                y(before + LIMIT),
                n(axis.x(stop)),
                y(before + LIMIT + (stop - first) as f64 / (100 * MS) as f64)
            );
        }
        let _ = writeln!(o, "<path class=\"l\" d=\"{d}\"/>");
        // A mark per request: admitted (a dot where it leaves, a line back to its arrival if
        // delayed), denied (a red ring on the offered line).
        let (mut lines, mut dots, mut rings) = (String::new(), String::new(), String::new());
        for (k, &(dep, arr)) in admitted.iter().enumerate() {
            let yk = y(k as f64 + 1.0);
            if dep > arr {
                let _ = write!(lines, "M{} {yk}H{}", n(axis.x(arr)), n(axis.x(dep)));
            }
            let _ = write!(dots, "M{} {yk}h0", n(axis.x(dep)));
        }
        for (k, &(arr, _)) in t.marks.iter().enumerate().filter(|m| m.1 .1.is_none()) {
            let _ = write!(rings, "M{} {}h0", n(axis.x(arr)), y(k as f64 + 1.0));
        }
        for (class, d) in [("q", &lines), ("p", &dots), ("r", &rings)] {
            if !d.is_empty() {
                let _ = writeln!(o, "<path class=\"{class}\" d=\"{d}\"/>");
            }
        }
        o.push_str("</g>\n");
    }
    o.push_str("</svg>\n");
    o
}
