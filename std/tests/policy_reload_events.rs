//! With the `tracing` feature (on by default), every reload is a `tracing` event: `info`
//! naming the generation, the rule count and what changed when applied, `warn` naming why
//! when refused (the rules in force kept).
#![cfg(feature = "tracing")]

use std::sync::{Arc, Mutex};

use tollgate::policy::Policy;
use tollgate::ManualClock;

/// Every event seen on this thread while it is the default subscriber, as
/// `LEVEL field=value …`.
#[derive(Default)]
struct Events(Mutex<Vec<String>>);

impl tracing::Subscriber for Events {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={:?}", field.name(), value));
            }
        }
        let mut text = Text(event.metadata().level().to_string());
        event.record(&mut text);
        self.0.lock().unwrap().push(text.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn every_reload_is_an_event_and_a_refused_one_says_why() {
    let policy = Policy::from_toml(
        "[[rules]]\nname = \"default\"\nlimit = 2\nwindow = \"1m\"\n",
        ManualClock::new(),
    )
    .unwrap();
    let events = Arc::new(Events::default());
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
    let events = events.0.lock().unwrap().clone();
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
