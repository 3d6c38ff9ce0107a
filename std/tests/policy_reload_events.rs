//! With the `tracing` feature (on by default), every reload is a `tracing` event: `info`
//! naming the generation, the rule count and what changed when applied, `warn` naming why
//! when refused (the rules in force kept).
#![cfg(feature = "tracing")]

mod events_support;

use std::sync::Arc;

use events_support::Events;
use tollgate::policy::Policy;
use tollgate::ManualClock;

#[test]
fn every_reload_is_an_event_and_a_refused_one_says_why() {
    let policy = Policy::from_toml(
        "[[rules]]\nname = \"default\"\nlimit = 2\nwindow = \"1m\"\n",
        ManualClock::new(),
    )
    .unwrap();
    let events = Arc::new(Events::at_least(tracing::Level::TRACE));
    {
        let _default = tracing::subscriber::set_default(Arc::clone(&events));
        policy
            .reload_toml(
                "[[rules]]\nname = \"default\"\nlimit = 4\nwindow = \"1m\"\n\
                 [[rules]]\nname = \"search\"\nendpoint = \"/search\"\nlimit = 1\nwindow = \"1s\"\n",
            )
            .unwrap();
        assert!(policy.reload_toml("").is_err());
        assert!(policy
            .reload_toml("[[rules]]\nname = \"x\"\nlimit = 0\nwindow = \"1m\"\n")
            .is_err());
    }
    let events = events.seen();
    assert_eq!(events.len(), 3, "{events:#?}");
    assert!(
        events[0].starts_with("INFO message=tollgate: rules reloaded generation=")
            && events[0].ends_with(" rules=2 changes=added search; changed default"),
        "{}",
        events[0]
    );
    for refused in &events[1..] {
        assert!(
            refused.starts_with(
                "WARN message=tollgate: rules reload refused; the rules in force are kept error="
            ),
            "{refused}"
        );
    }
    assert!(
        events[2].contains("limit"),
        "the error names the field: {}",
        events[2]
    );
    assert_eq!(
        policy.rule_set().rules().len(),
        2,
        "the refused reloads changed nothing"
    );
}
