//! [`expand`]: the Lua sources' inline blocks, written once and pasted where the hot paths
//! want them without a function call, when the library is assembled.
//!
//! Three directives, each in a Lua comment (so an unexpanded source still loads: a block is
//! a long comment, a use a line comment, a constant a local):
//!
//! - a block: a line `--[=[@define NAME`, its lines, then a line `--]=]`; taken out of the
//!   output;
//! - a use: a line `--@inline NAME`, replaced by the block's lines re-indented to the
//!   directive's indentation (a block may inline others);
//! - a constant: a line `local NAME = DIGITS --@const`, taken out, every whole-word `NAME`
//!   in the output becoming `DIGITS` (a number named where it is derived, compared with
//!   as a literal: no upvalue read on the hot paths).
//!
//! The sources are the crate's own, so a use naming no block is a bug the tests catch
//! (`every_directive_is_expanded`): it is left in the output as the comment it is.

use std::collections::HashMap;

/// `defs` with its blocks inlined and its constants substituted.
pub(super) fn expand(defs: &str) -> String {
    let mut blocks: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut consts: Vec<(&str, &str)> = Vec::new();
    let mut kept: Vec<&str> = Vec::new();
    let mut open: Option<(&str, Vec<&str>)> = None;
    for line in defs.lines() {
        let directive = line.trim_start();
        if let Some((name, body)) = open.as_mut() {
            if directive.trim_end() == "--]=]" {
                blocks.insert(*name, std::mem::take(body));
                open = None;
            } else {
                body.push(line);
            }
        } else if let Some(name) = directive.strip_prefix("--[=[@define ") {
            open = Some((name.trim(), Vec::new()));
        } else if let Some(constant) = constant(line) {
            consts.push(constant);
        } else {
            kept.push(line);
        }
    }
    let mut out = String::with_capacity(defs.len() * 2);
    for line in kept {
        paste(&mut out, line, &blocks, 0);
    }
    for (name, value) in consts {
        out = replace_word(&out, name, value);
    }
    out
}

/// The name and digits of a constant's line, `local NAME = DIGITS --@const`.
fn constant(line: &str) -> Option<(&str, &str)> {
    let declared = line.strip_prefix("local ")?.strip_suffix("--@const")?;
    let (name, value) = declared.split_once('=')?;
    let (name, value) = (name.trim(), value.trim());
    let word = |s: &str, f: fn(char) -> bool| !s.is_empty() && s.chars().all(f);
    (word(name, |c| c.is_ascii_alphanumeric() || c == '_') && word(value, |c| c.is_ascii_digit()))
        .then_some((name, value))
}

/// `text` with every whole-word `name` (not part of a longer identifier) replaced by
/// `value`.
fn replace_word(text: &str, name: &str, value: &str) -> String {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(name) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + name.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_some_and(ident) || after.is_some_and(ident) {
            out.push_str(name);
        } else {
            out.push_str(value);
        }
        rest = &rest[at + name.len()..];
    }
    out.push_str(rest);
    out
}

/// Appends `line` to `out`, or, for an `--@inline` of a known block, the block's lines
/// re-indented to the directive's (blocks inlined within it too, `depth` levels deep).
fn paste(out: &mut String, line: &str, blocks: &HashMap<&str, Vec<&str>>, depth: usize) {
    let directive = line.trim_start();
    let indent = &line[..line.len() - directive.len()];
    let block = directive
        .strip_prefix("--@inline ")
        .and_then(|name| blocks.get(name.trim()));
    match block {
        // A block inlining itself (at any depth) is left as its directive.
        Some(body) if depth < 8 => {
            let common = body
                .iter()
                .filter(|l| !l.trim().is_empty())
                .map(|l| l.len() - l.trim_start().len())
                .min()
                .unwrap_or(0);
            for l in body {
                if l.trim().is_empty() {
                    out.push('\n');
                    continue;
                }
                let mut shifted = String::with_capacity(indent.len() + l.len());
                shifted.push_str(indent);
                shifted.push_str(l.get(common..).unwrap_or(l));
                paste(out, &shifted, blocks, depth + 1);
            }
        }
        Some(_) | None => {
            out.push_str(line);
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_pasted_reindented_and_constants_substituted() {
        let src = "\
local BIG = 1048576 --@const
--[=[@define memo
local d = x
if d < BIG then
  y = d
end
--]=]
function f()
  --@inline memo
  return BIGGER, BIG
end
";
        assert_eq!(
            expand(src),
            "function f()\n  local d = x\n  if d < 1048576 then\n    y = d\n  end\n  return BIGGER, 1048576\nend\n"
        );
    }

    #[test]
    fn blocks_inline_blocks_and_an_unknown_one_stays_a_comment() {
        let src = "--[=[@define a\nx = 1\n--]=]\n--[=[@define b\n--@inline a\ny = 2\n--]=]\n--@inline b\n--@inline c\n";
        assert_eq!(expand(src), "x = 1\ny = 2\n--@inline c\n");
    }
}
