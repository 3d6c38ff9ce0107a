//! [`Report`]: the rows of a `compare` run, rendered as a console table, a markdown table
//! (for docs/benchmarks.md) and the JSON the issue specifies.

use crate::{Contender, Row};
use std::fmt::Write as _;

/// Every measured case of one run, in run order.
///
/// ```
/// use tollgate_bench::{Report, Row, Unit};
/// let report = Report { rows: vec![Row {
///     name: "keyed_100k".into(), unit: Unit::Ns, values: [Some(12.1), Some(38.0), None],
/// }] };
/// assert_eq!(
///     report.json(),
///     r#"{"cases":[{"name":"keyed_100k","unit":"ns","tollgate":12.1,"governor":38,"floor":null}]}"#
/// );
/// assert!(report.table().contains("keyed_100k"));
/// assert!(report.markdown().starts_with("| case |"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The measured cases.
    pub rows: Vec<Row>,
}

impl Report {
    /// `{"cases":[{"name":…,"unit":"ns"|"ns_p50"|"ns_p99"|"bytes_per_key","tollgate":…,"governor":…,"floor":…},…]}`
    /// with `null` for a missing figure.
    pub fn json(&self) -> String {
        let mut out = String::from("{\"cases\":[");
        for (i, row) in self.rows.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"name\":\"{}\",\"unit\":\"{}\"",
                json_escape(&row.name),
                row.unit.name()
            );
            for contender in Contender::ALL {
                let _ = write!(
                    out,
                    ",\"{}\":{}",
                    contender.name(),
                    json_number(row.get(contender))
                );
            }
            out.push('}');
        }
        out.push_str("]}");
        out
    }

    /// A fixed-width table for the console.
    pub fn table(&self) -> String {
        let width = self
            .rows
            .iter()
            .map(|r| r.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let mut out = format!(
            "{:<width$}  {:>13}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}\n",
            "case", "unit", "tollgate", "governor", "floor", "t/gov", "t/floor"
        );
        for row in &self.rows {
            let _ = writeln!(
                out,
                "{:<width$}  {:>13}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}",
                row.name,
                row.unit.name(),
                figure(row.get(Contender::Tollgate)),
                figure(row.get(Contender::Governor)),
                figure(row.get(Contender::Floor)),
                ratio(row.ratio(Contender::Governor)),
                ratio(row.ratio(Contender::Floor)),
            );
        }
        out
    }

    /// A markdown table (for docs/benchmarks.md).
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| case | unit | tollgate | governor | floor | tollgate/governor | tollgate/floor |\n\
             |---|---|---:|---:|---:|---:|---:|\n",
        );
        for row in &self.rows {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} | {} | {} |",
                row.name,
                row.unit.name(),
                figure(row.get(Contender::Tollgate)),
                figure(row.get(Contender::Governor)),
                figure(row.get(Contender::Floor)),
                ratio(row.ratio(Contender::Governor)),
                ratio(row.ratio(Contender::Floor)),
            );
        }
        out
    }
}

fn figure(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

fn ratio(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.2}x"))
}

/// A JSON number with two decimals at most (trailing zeros dropped), or `null`.
fn json_number(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_finite() => {
            let s = format!("{v:.2}");
            let s = s.trim_end_matches('0').trim_end_matches('.');
            s.to_string()
        }
        _ => "null".into(),
    }
}

fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}
