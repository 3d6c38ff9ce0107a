//! `lua_script`: the Redis store's script as `LuaScript::for_store` assembles it (its inline
//! blocks expanded), for the Lua harnesses in `bench/lua/`, which run exactly what the store
//! sends:
//!
//! ```sh
//! cargo run -q --release -p tollgate-bench --features redis --bin lua_script -- body
//! ```
//!
//! `body`: the EVAL body; `library`: the function library; `function`: its function's name.
use tollgate_redis::LuaScript;

fn main() {
    let script = LuaScript::for_store();
    match std::env::args().nth(1).as_deref() {
        Some("body") => print!("{}", script.body()),
        Some("library") => print!("{}", script.library()),
        Some("function") => println!("{}", script.function_name()),
        _ => {
            eprintln!("usage: lua_script body|library|function");
            std::process::exit(2);
        }
    }
}
