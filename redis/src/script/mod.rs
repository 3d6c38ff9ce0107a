//! [`LuaScript`]: the store's server-side transitions, as one Lua script and its SHA-1
//! (what `EVALSHA` names), and the same script as a function library (what
//! `FUNCTION LOAD` installs and `FCALL` calls).
//!
//! Each algorithm's transition lives in its own file under `scripts/` and mirrors the core's
//! `decide` line by line; `prelude.lua` supplies exact multi-limb integer arithmetic (see the
//! [module docs](super) for why) and `store.lua` runs one operation on every tier of a plan
//! (tagged states converted on read), all or nothing. The hot paths' inline copies are not
//! written by hand: a block is written once and pasted where it is used when the library
//! is assembled ([`inline`]).

mod inline;

const PRELUDE: &str = include_str!("../scripts/prelude.lua");
const STORE: &str = include_str!("../scripts/store.lua");

/// Every algorithm source, in the order they are concatenated.
const ALGORITHMS: [(&str, &str); 5] = [
    ("gcra", include_str!("../scripts/gcra.lua")),
    ("leaky", include_str!("../scripts/leaky_bucket.lua")),
    ("fixed", include_str!("../scripts/fixed_window.lua")),
    ("swc", include_str!("../scripts/sliding_window_counter.lua")),
    ("log", include_str!("../scripts/sliding_window_log.lua")),
];

/// A Lua script: its body and SHA-1 hex digest (what `EVAL` / `EVALSHA` run), and the same
/// definitions as a Redis function library (what `FUNCTION LOAD` installs and `FCALL` calls).
///
/// Both forms define the prelude, the algorithms and the runner's helpers at the top level
/// and one entry point `main(keys, args)`: the library registers `main` as its function,
/// so loading it runs the definitions once; the body ends in `return main(KEYS, ARGV)`.
///
/// ```
/// use tollgate_redis::LuaScript;
/// let script = LuaScript::for_store();
/// assert_eq!(script.sha().len(), 40);
/// assert!(script.body().contains("ALGOS['fixed']"));
/// assert_eq!(script.function_name(), format!("tollgate_{}", script.sha()));
/// assert!(script.library().starts_with(&format!("#!lua name={}\n", script.function_name())));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LuaScript {
    body: String,
    sha: String,
    library: String,
    function: String,
}

impl LuaScript {
    /// The policy store's script ([`RedisStore`](super::RedisStore)): every algorithm and
    /// the tagged-state runner, with 4 limbs (conversions widen to 6 where they need
    /// `u128`).
    pub fn for_store() -> LuaScript {
        LuaScript::assemble(4, ALGORITHMS.iter().map(|(_, source)| *source), STORE)
    }

    /// The prelude with `limbs` limbs per number, then `algorithms`, then `runner` (which
    /// defines `main`), as an EVAL body and as a function library named after its SHA.
    fn assemble<'a>(
        limbs: u32,
        algorithms: impl Iterator<Item = &'a str>,
        runner: &str,
    ) -> LuaScript {
        let mut defs = format!("local NL = {limbs}\nlocal BASE_NL = NL\n");
        defs.push_str(PRELUDE);
        for source in algorithms {
            defs.push('\n');
            defs.push_str(source);
        }
        defs.push('\n');
        defs.push_str(runner);
        let defs = inline::expand(&defs);
        // The EVAL body reads the KEYS / ARGV globals before the runner's locals shadow them.
        let body = format!(
            "local EVAL_KEYS, EVAL_ARGV = KEYS, ARGV\n{defs}\nreturn main(EVAL_KEYS, EVAL_ARGV)\n"
        );
        let sha = redis::Script::new(&body).get_hash().to_owned();
        // Named after the body's SHA: two different scripts never replace each other's
        // library, and the same script loaded twice replaces it with itself.
        let function = format!("tollgate_{sha}");
        let library =
            format!("#!lua name={function}\n{defs}\nredis.register_function('{function}', main)\n");
        LuaScript {
            body,
            sha,
            library,
            function,
        }
    }

    /// The full Lua source (what `EVAL` sends after a `NOSCRIPT`).
    pub fn body(&self) -> &str {
        &self.body
    }

    /// The SHA-1 of the body, as `EVALSHA` wants it.
    pub fn sha(&self) -> &str {
        &self.sha
    }

    /// The function library (what `FUNCTION LOAD REPLACE` sends): `#!lua name=…`, the
    /// definitions, and `redis.register_function` of [`function_name`](Self::function_name).
    pub fn library(&self) -> &str {
        &self.library
    }

    /// The name of the library and of its one function (what `FCALL` names):
    /// `tollgate_` and the body's SHA-1.
    pub fn function_name(&self) -> &str {
        &self.function
    }
}

#[cfg(test)]
mod tests {
    use super::LuaScript;

    /// Every inline block the sources use is defined, and no directive is left in the
    /// script that runs.
    #[test]
    fn every_directive_is_expanded() {
        let script = LuaScript::for_store();
        for directive in [
            "@define",
            "--@inline ",
            "--]=]",
            "--@const",
            "HI_SPAN",
            "ROOMY_HI",
        ] {
            assert!(
                !script.body().contains(directive),
                "{directive} left in the script"
            );
        }
    }
}
