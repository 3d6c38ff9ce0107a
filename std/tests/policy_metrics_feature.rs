//! With the `metrics` feature, `Metered` reports every counted decision to the `metrics`
//! facade as `tollgate_policy_decisions_total{rule, outcome}`.
//! Run: `cargo test -p tollgate --features metrics --test policy_metrics_feature`.
#![cfg(feature = "metrics")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use tollgate::policy::{Metered, Policy, PolicyCheck};
use tollgate::ManualClock;

type Totals = Arc<Mutex<BTreeMap<String, u64>>>;

struct Handle(String, Totals);

impl CounterFn for Handle {
    fn increment(&self, value: u64) {
        *self.1.lock().unwrap().entry(self.0.clone()).or_default() += value;
    }
    fn absolute(&self, value: u64) {
        self.1.lock().unwrap().insert(self.0.clone(), value);
    }
}

#[derive(Default)]
struct Collect(Totals);

impl Recorder for Collect {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        Counter::from_arc(Arc::new(Handle(name, self.0.clone())))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[test]
fn decisions_reach_the_metrics_facade() {
    let recorder = Collect::default();
    let policy = Policy::from_toml(
        "[[rules]]\nname = \"default\"\nlimit = 2\nwindow = \"1m\"\n",
        ManualClock::new(),
    )
    .unwrap();
    let metered = Metered::new(policy);
    metrics::with_local_recorder(&recorder, || {
        for _ in 0..5 {
            metered.allow("a", "/", 1).unwrap();
        }
    });
    let totals = recorder.0.lock().unwrap().clone();
    assert_eq!(
        totals,
        BTreeMap::from([
            (
                "tollgate_policy_decisions_total{rule=default,outcome=allowed}".to_owned(),
                2
            ),
            (
                "tollgate_policy_decisions_total{rule=default,outcome=denied}".to_owned(),
                3
            ),
        ])
    );
}
