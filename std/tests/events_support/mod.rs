//! A `tracing` subscriber for the event tests (the policy's reloads, the Redis store's
//! failures, the HTTP layer's wiring error): every event at `level` or more severe, from
//! any thread while it is the default, kept as `LEVEL field=value field=value …`.

use std::sync::Mutex;

/// The events seen (see the module docs).
pub(crate) struct Events {
    level: tracing::Level,
    seen: Mutex<Vec<String>>,
}

impl Events {
    /// Keeps the events at `level` or more severe.
    pub(crate) fn at_least(level: tracing::Level) -> Events {
        Events {
            level,
            seen: Mutex::default(),
        }
    }

    /// The events so far, oldest first.
    pub(crate) fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl tracing::Subscriber for Events {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= self.level
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
        self.seen.lock().unwrap().push(text.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
