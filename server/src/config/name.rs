//! How a node is named in tollgate: its endpoint ([`endpoint_segment`], a unique exact
//! selector built from the path of keys and values) and its rule's name ([`Names`], printable
//! ASCII and unique).

use std::collections::HashSet;
use std::fmt::Write;

/// Appends `text` to `out` with every character tollgate's selectors give a meaning to
/// (`*`, `{`, `}`, `:`), those the endpoint itself uses (`/` between levels, `=` between key
/// and value), `%`, and `~` (the server's own rules' prefix) written as `%XX`, so that the
/// result is an exact selector, distinct paths give distinct endpoints, and none begins
/// with `~`.
pub(super) fn escape_segment(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '%' | '*' | '{' | '}' | ':' | '/' | '=' | '~' => {
                let _ = write!(out, "%{:02X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}

/// The endpoint segment of one level: `key=value`, or `key` for a node without a value.
pub(super) fn endpoint_segment(key: &str, value: Option<&str>, out: &mut String) {
    escape_segment(key, out);
    if let Some(value) = value {
        out.push('=');
        escape_segment(value, out);
    }
}

/// The rule names given so far, across every domain.
#[derive(Debug, Default)]
pub(super) struct Names {
    used: HashSet<Box<str>>,
}

impl Names {
    /// A name for `wanted` that tollgate accepts (printable ASCII; every other byte
    /// `%XX`), that does not begin with `~` (the server's own rules' prefix: a leading one
    /// is `%7E`) and that no earlier rule has (`#2`, `#3`, … appended until none has).
    pub(super) fn claim(&mut self, wanted: &str) -> Box<str> {
        let mut base = String::with_capacity(wanted.len());
        for (i, c) in wanted.chars().enumerate() {
            if i == 0 && c == '~' {
                base.push_str("%7E");
            } else if (' '..='~').contains(&c) {
                base.push(c);
            } else {
                let mut bytes = [0; 4];
                for b in c.encode_utf8(&mut bytes).bytes() {
                    let _ = write!(base, "%{b:02X}");
                }
            }
        }
        let mut name = base.clone();
        let mut n = 1u64;
        while self.used.contains(name.as_str()) {
            n += 1;
            name.clear();
            let _ = write!(name, "{base}#{n}");
        }
        let name: Box<str> = name.into();
        self.used.insert(name.clone());
        name
    }
}
