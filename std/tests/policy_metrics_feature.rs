//! With the `metrics` feature, `Metered` reports every counted decision to the `metrics`
//! facade as `tollgate_policy_decisions_total{rule, outcome}`, and every policy its
//! reloads as `tollgate_policy_reloads_total{outcome}` and `tollgate_policy_rules`.
//! Run: `cargo test -p tollgate --features metrics --test policy_metrics_feature`.
#![cfg(feature = "metrics")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
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

/// A gauge's last value, kept as a whole number (the gauges here count things).
impl GaugeFn for Handle {
    fn increment(&self, value: f64) {
        *self.1.lock().unwrap().entry(self.0.clone()).or_default() += value as u64;
    }
    fn decrement(&self, value: f64) {
        *self.1.lock().unwrap().entry(self.0.clone()).or_default() -= value as u64;
    }
    fn set(&self, value: f64) {
        self.1.lock().unwrap().insert(self.0.clone(), value as u64);
    }
}

#[derive(Default)]
struct Collect(Totals);

impl Collect {
    fn name(key: &Key) -> String {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        format!("{}{{{}}}", key.name(), labels.join(","))
    }
}

impl Recorder for Collect {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(Handle(Self::name(key), self.0.clone())))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(Arc::new(Handle(Self::name(key), self.0.clone())))
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

#[test]
fn reloads_reach_the_metrics_facade() {
    let recorder = Collect::default();
    let policy = Policy::from_toml(
        "[[rules]]\nname = \"default\"\nlimit = 2\nwindow = \"1m\"\n",
        ManualClock::new(),
    )
    .unwrap();
    let two_rules = "[[rules]]\nname = \"default\"\nlimit = 4\nwindow = \"1m\"\n\
                     [[rules]]\nname = \"search\"\nendpoint = \"/search\"\nlimit = 1\nwindow = \"1s\"\n";
    metrics::with_local_recorder(&recorder, || {
        policy.reload_toml(two_rules).unwrap();
        // No rules at all: refused, the two rules stay in force.
        assert!(policy.reload_toml("").is_err());
        // Not TOML: refused too.
        assert!(policy.reload_toml("[[rules]\n").is_err());
    });
    assert_eq!(policy.rule_set().rules().len(), 2);
    let totals = recorder.0.lock().unwrap().clone();
    assert_eq!(
        totals,
        BTreeMap::from([
            (
                "tollgate_policy_reloads_total{outcome=applied}".to_owned(),
                1
            ),
            (
                "tollgate_policy_reloads_total{outcome=refused}".to_owned(),
                2
            ),
            ("tollgate_policy_rules{}".to_owned(), 2),
        ])
    );
}

/// The rules gauge is set when a policy is built, not only on its first reload: a server
/// that never reloads shows how many rules it runs.
#[test]
fn a_new_policy_sets_the_rules_gauge() {
    let recorder = Collect::default();
    let rules = "[[rules]]\nname = \"default\"\nlimit = 4\nwindow = \"1m\"\n\
                 [[rules]]\nname = \"search\"\nendpoint = \"/search\"\nlimit = 1\nwindow = \"1s\"\n";
    let policy = metrics::with_local_recorder(&recorder, || {
        Policy::from_toml(rules, ManualClock::new()).unwrap()
    });
    assert_eq!(policy.rule_set().rules().len(), 2);
    let totals = recorder.0.lock().unwrap().clone();
    assert_eq!(
        totals,
        BTreeMap::from([("tollgate_policy_rules{}".to_owned(), 2)])
    );
}
