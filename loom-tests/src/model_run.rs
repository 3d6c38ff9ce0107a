//! [`ModelRun`]: one loom model — threads of operations on a shared subject, checked
//! against a sequential oracle after every explored execution.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc as StdArc;
use std::time::Instant;

use loom::sync::Arc;

use crate::{linearization, Answer, Op, Oracle, Subject};

/// The preemption bound used when `LOOM_MAX_PREEMPTIONS` is not set.
///
/// 3, as loom's documentation suggests (2–3 finds most bugs at a bounded cost) and the issue
/// asks: the whole run stays within minutes on 2 cores, and each deliberately broken twin
/// (a lost update, an unclaimed ring write, an unlocked insert) fails within it. Set
/// `LOOM_MAX_PREEMPTIONS` higher for a deeper, slower search.
pub const DEFAULT_PREEMPTION_BOUND: usize = 3;

/// Explores every interleaving of `body` up to the preemption bound (`LOOM_MAX_PREEMPTIONS`,
/// else [`DEFAULT_PREEMPTION_BOUND`]) with at most `max_branches` scheduling points per
/// execution (loom's default when `None`), and prints how many executions it explored and
/// how long it took: the runner of the models that assert inside their own threads.
pub fn explore(name: &str, max_branches: Option<usize>, body: impl Fn() + Sync + Send + 'static) {
    explore_within(name, max_branches, usize::MAX, body);
}

/// [`explore`] with the preemption bound capped at `max_preemptions` (for a model of three
/// threads whose full bound would take many minutes; `LOOM_MAX_PREEMPTIONS` still lowers
/// it).
pub fn explore_within(
    name: &str,
    max_branches: Option<usize>,
    max_preemptions: usize,
    body: impl Fn() + Sync + Send + 'static,
) {
    let mut builder = loom::model::Builder::new();
    let bound = builder
        .preemption_bound
        .unwrap_or(DEFAULT_PREEMPTION_BOUND)
        .min(max_preemptions);
    builder.preemption_bound = Some(bound);
    if let Some(max) = max_branches {
        builder.max_branches = max;
    }
    let executions = StdArc::new(AtomicUsize::new(0));
    let counter = StdArc::clone(&executions);
    let bound = builder.preemption_bound;
    let started = Instant::now();
    builder.check(move || {
        // Relaxed: a statistic read after the model finished.
        counter.fetch_add(1, Ordering::Relaxed);
        body();
    });
    eprintln!(
        "loom model {name}: {} executions in {:.2?} (preemption bound {})",
        // Relaxed: the model has finished.
        executions.load(Ordering::Relaxed),
        started.elapsed(),
        bound.unwrap_or(DEFAULT_PREEMPTION_BOUND)
    );
}

/// A loom model: up to [`loom::MAX_THREADS`]` − 1` threads, each a list of operations, run
/// concurrently against one shared [`Subject`].
///
/// After each explored execution it asserts:
/// 1. if [`at_most_admitted`](Self::at_most_admitted) was given, that the permits admitted
///    in total do not exceed it (panics with `"more than"`);
/// 2. that some interleaving of the threads, run through the [`Oracle`], answers every
///    operation identically and leaves the same final state (panics with
///    `"no sequential order"`).
///
/// On success it prints the number of executions explored and the wall time.
#[derive(Clone, Debug)]
pub struct ModelRun {
    name: &'static str,
    setup: Vec<Op>,
    threads: Vec<Vec<Op>>,
    at_most_admitted: Option<u64>,
}

impl ModelRun {
    /// A model named `name` (used in its report line and panic messages), no threads yet.
    pub fn new(name: &'static str) -> ModelRun {
        ModelRun {
            name,
            setup: Vec::new(),
            threads: Vec::new(),
            at_most_admitted: None,
        }
    }

    /// Operations run on the fresh subject (and the oracle) before any thread starts,
    /// e.g. to put a key in a table; their answers must match the oracle's.
    pub fn setup(mut self, ops: impl IntoIterator<Item = Op>) -> ModelRun {
        self.setup.extend(ops);
        self
    }

    /// Adds a thread running `ops` in order. The first thread runs on loom's main thread.
    pub fn thread(mut self, ops: impl IntoIterator<Item = Op>) -> ModelRun {
        self.threads.push(ops.into_iter().collect());
        self
    }

    /// Also asserts that at most `limit` permits are admitted in total (for histories whose
    /// `now` values all lie within one window).
    pub fn at_most_admitted(mut self, limit: u64) -> ModelRun {
        self.at_most_admitted = Some(limit);
        self
    }

    /// Every `now` the model's operations use.
    pub fn nows(&self) -> Vec<u64> {
        self.setup
            .iter()
            .chain(self.threads.iter().flatten())
            .map(|op| op.now().as_u64())
            .collect()
    }

    /// Explores the model: `subject` builds a fresh shared subject for each execution,
    /// `oracle` is the fresh sequential specification.
    pub fn run<S, O>(self, subject: impl Fn() -> S + Send + Sync + 'static, oracle: O)
    where
        S: Subject,
        O: Oracle,
    {
        assert!(
            !self.threads.is_empty(),
            "a model needs at least one thread"
        );
        let mut oracle = oracle;
        let setup_answers: Vec<Answer> = self.setup.iter().map(|&op| oracle.apply(op)).collect();
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(DEFAULT_PREEMPTION_BOUND);
        }
        let bound = builder.preemption_bound;
        let executions = StdArc::new(AtomicUsize::new(0));
        let name = self.name;
        let counter = StdArc::clone(&executions);
        let started = Instant::now();
        builder.check(move || {
            // Relaxed: a plain statistic read after the model finished.
            counter.fetch_add(1, Ordering::Relaxed);
            self.explore_once(&subject, &oracle, &setup_answers);
        });
        eprintln!(
            "loom model {name}: {} executions in {:.2?} (preemption bound {})",
            // Relaxed: the model has finished; no other thread touches the counter.
            executions.load(Ordering::Relaxed),
            started.elapsed(),
            bound.map_or_else(|| "none".to_owned(), |b| b.to_string()),
        );
    }

    fn explore_once<S: Subject, O: Oracle>(
        &self,
        make: &impl Fn() -> S,
        oracle: &O,
        setup_answers: &[Answer],
    ) {
        let subject = Arc::new(make());
        let setup = run_ops(&*subject, &self.setup);
        assert_eq!(
            setup, setup_answers,
            "{}: setup answered unlike the oracle",
            self.name
        );
        let handles: Vec<_> = self.threads[1..]
            .iter()
            .map(|ops| {
                let subject = Arc::clone(&subject);
                let ops = ops.clone();
                loom::thread::spawn(move || run_ops(&*subject, &ops))
            })
            .collect();
        let mut answers = vec![run_ops(&*subject, &self.threads[0])];
        answers.extend(
            handles
                .into_iter()
                .map(|h| h.join().expect("model thread panicked")),
        );
        let final_state = subject.final_state();

        if let Some(limit) = self.at_most_admitted {
            let admitted: u64 = self
                .threads
                .iter()
                .flatten()
                .zip(answers.iter().flatten())
                .filter(|(op, answer)| op.commits() && matches!(answer, Ok(d) if d.allowed))
                .map(|(op, _)| u64::from(op.cost()))
                .sum();
            assert!(
                admitted <= limit,
                "{}: admitted {admitted} permits, more than the limit {limit} in one window\n\
                 threads: {:?}\nanswers: {answers:#?}",
                self.name,
                self.threads,
            );
        }

        if linearization::find(oracle, &self.threads, &answers, &final_state).is_none() {
            panic!(
                "{}: no sequential order of the operations explains this execution\n\
                 threads: {:?}\nanswers: {answers:#?}\nfinal state: {final_state:?}",
                self.name, self.threads,
            );
        }
    }
}

fn run_ops<S: Subject>(subject: &S, ops: &[Op]) -> Vec<Answer> {
    ops.iter().map(|&op| subject.apply(op)).collect()
}
