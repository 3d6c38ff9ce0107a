//! [`LuaScript`]: the server-side transition of a set of algorithms, as one Lua script and
//! its SHA-1 (what `EVALSHA` names).
//!
//! Each algorithm's transition lives in its own file under `scripts/` and mirrors the core's
//! `decide` line by line; `prelude.lua` supplies exact multi-limb integer arithmetic (see the
//! [module docs](super) for why) and `runner.lua` decides every tier, then writes all or
//! nothing. A limiter with one rule runs the script of that one algorithm; a multi-tier
//! limiter runs one script holding the algorithms its tiers use.

use super::RedisRule;

const PRELUDE: &str = include_str!("scripts/prelude.lua");
const RUNNER: &str = include_str!("scripts/runner.lua");
const STORE: &str = include_str!("scripts/store.lua");

/// Every algorithm source, in the order they are concatenated.
const ALGORITHMS: [(&str, &str); 5] = [
    ("gcra", include_str!("scripts/gcra.lua")),
    ("leaky", include_str!("scripts/leaky_bucket.lua")),
    ("fixed", include_str!("scripts/fixed_window.lua")),
    ("swc", include_str!("scripts/sliding_window_counter.lua")),
    ("log", include_str!("scripts/sliding_window_log.lua")),
];

/// A Lua script body and its SHA-1 hex digest.
///
/// ```
/// use tollgate::redis::{LuaScript, RedisRule};
/// use tollgate::{AlgorithmConfig, Nanos};
/// let rule = RedisRule::new(
///     "api",
///     AlgorithmConfig::FixedWindow { limit: 10, window: Nanos::from_secs(1) },
/// )?;
/// let script = LuaScript::for_rules(std::slice::from_ref(&rule));
/// assert_eq!(script.sha().len(), 40);
/// assert!(script.body().contains("ALGOS['fixed']"));
/// assert!(!script.body().contains("ALGOS['gcra']"));
/// # Ok::<(), tollgate::redis::BuildError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LuaScript {
    body: String,
    sha: String,
}

impl LuaScript {
    /// The script for the algorithms `rules` use (each algorithm included once).
    pub fn for_rules(rules: &[RedisRule]) -> LuaScript {
        // Limbs per number (see prelude.lua): 3 (72 bits) hold every intermediate except
        // the sliding window counter's products of a count (< 2^31) and a duration
        // (< 2^64), which need 4 (96 bits).
        let limbs = if rules.iter().any(|rule| rule.script_algorithm() == "swc") {
            4
        } else {
            3
        };
        let mut body = format!("local NL = {limbs}\n");
        body.push_str(PRELUDE);
        for (name, source) in ALGORITHMS {
            if rules.iter().any(|rule| rule.script_algorithm() == name) {
                body.push('\n');
                body.push_str(source);
            }
        }
        body.push('\n');
        body.push_str(RUNNER);
        let sha = redis::Script::new(&body).get_hash().to_owned();
        LuaScript { body, sha }
    }

    /// The policy store's script ([`RedisStore`](super::RedisStore)): every algorithm and
    /// the tagged-state runner, with 4 limbs (conversions widen to 6 where they need
    /// `u128`).
    pub fn for_store() -> LuaScript {
        let mut body = String::from("local NL = 4\n");
        body.push_str(PRELUDE);
        for (_, source) in ALGORITHMS {
            body.push('\n');
            body.push_str(source);
        }
        body.push('\n');
        body.push_str(STORE);
        let sha = redis::Script::new(&body).get_hash().to_owned();
        LuaScript { body, sha }
    }

    /// The full Lua source (what `EVAL` sends after a `NOSCRIPT`).
    pub fn body(&self) -> &str {
        &self.body
    }

    /// The SHA-1 of the body, as `EVALSHA` wants it.
    pub fn sha(&self) -> &str {
        &self.sha
    }
}
