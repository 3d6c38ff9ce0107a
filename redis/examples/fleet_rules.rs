//! The operator's side of the fleet rules: publish a rules file to every process that
//! follows the prefix, and see which version each one runs. Needs a redis-server:
//! `cargo run -p tollgate-redis --example fleet_rules -- publish rules.toml [REDIS_URL]`
//! `cargo run -p tollgate-redis --example fleet_rules -- status [REDIS_URL]`
use tollgate_redis::{FleetRules, FleetRulesConfig, RedisTarget};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = |i: usize| {
        args.get(i)
            .cloned()
            .unwrap_or("redis://127.0.0.1:6379".into())
    };
    let config = FleetRulesConfig::new("api")?;
    match args.first().map(String::as_str) {
        Some("publish") => {
            let rules = std::fs::read_to_string(args.get(1).ok_or("publish RULES_FILE")?)?;
            let target = RedisTarget::Single(url(2));
            // Checked first: wrong rules are refused here and never reach the fleet.
            let version = FleetRules::publish(&target, &config, &rules).await?;
            println!(
                "published version {version}; applied everywhere within {:?}",
                config.bound()
            );
        }
        Some("status") => {
            let target = RedisTarget::Single(url(1));
            if let Some((version, _)) = FleetRules::published(&target, &config).await? {
                println!("published: version {version}");
            }
            for process in FleetRules::running(&target, &config).await? {
                println!(
                    "{} runs version {} (reported {:?} ago)",
                    process.process, process.version, process.reported_ago
                );
            }
        }
        _ => {
            return Err(
                "usage: fleet_rules publish RULES_FILE [REDIS_URL] | status [REDIS_URL]".into(),
            )
        }
    }
    Ok(())
}
