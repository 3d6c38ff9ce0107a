//! The follower's thread: each round subscribes to the announcements if it is not, polls
//! the published version, applies a new one, and reports the version it runs; then waits
//! a poll interval, an announcement, or a stop.

use std::fmt;
use std::sync::Arc;

use futures_util::StreamExt;
use redis::aio::PubSubStream;
use tokio::sync::watch;

use super::link::{subscribe, unix_ms, Link};
use super::{FleetRulesConfig, FleetRulesError, Shared};
use crate::events;
use crate::keys::{rules_key, running_key};
use crate::RedisTarget;

/// The follower's thread.
pub(super) struct Follower<F> {
    shared: Arc<Shared>,
    /// Applies a version's document.
    apply: F,
    target: RedisTarget,
    config: FleetRulesConfig,
    /// The connection of the polls, made again after a failure.
    link: Option<Link>,
    /// The version in force, with when it was published (its identity: see `try_poll`).
    applied: Option<(u64, u64)>,
    /// The last version the policy refused, with when it was published (not tried again).
    refused: Option<(u64, u64)>,
    /// Whether the last poll failed (a `warn` when polls start failing, an `info` when
    /// one succeeds again).
    failing: bool,
    /// Subscriptions tried (a cluster's nodes are tried in turn), and whether the last
    /// one failed (a `warn` when they start failing, an `info` when one succeeds again).
    subscriptions: usize,
    unsubscribed: bool,
}

impl<F, D, E> Follower<F>
where
    F: FnMut(&str) -> Result<D, E>,
    D: fmt::Display,
    E: fmt::Display,
{
    /// A follower of `config`'s prefix on `target`, applying each version with `apply`.
    pub(super) fn new(
        shared: Arc<Shared>,
        apply: F,
        target: RedisTarget,
        config: FleetRulesConfig,
    ) -> Follower<F> {
        Follower {
            shared,
            apply,
            target,
            config,
            link: None,
            applied: None,
            refused: None,
            failing: false,
            subscriptions: 0,
            unsubscribed: false,
        }
    }

    /// Polls and applies until told to stop, waking early on each announcement. A stop
    /// ends a round at its next await (never midway through applying a version).
    pub(super) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let channel = rules_key(&self.config.prefix);
        let mut announcements: Option<PubSubStream> = None;
        while !*stop.borrow() {
            let round = async {
                if self.config.subscribe && announcements.is_none() {
                    // Subscribed before the poll: a version published after it is announced.
                    announcements = self.subscribe(&channel).await;
                }
                self.poll().await;
            };
            tokio::select! {
                _ = stop.changed() => break,
                () = round => {}
            }
            tokio::select! {
                _ = stop.changed() => {}
                () = tokio::time::sleep(self.config.poll_interval) => {}
                announced = next(&mut announcements) => {
                    if announced.is_none() {
                        // The subscription's connection ended: polls carry on alone, and
                        // the next round subscribes again.
                        announcements = None;
                        self.shared.update(|s| s.subscribed = false);
                    }
                }
            }
        }
        // Leaving the fleet's list: best effort, one timeout at most.
        if let Some(link) = &mut self.link {
            let _: Result<u64, _> = link
                .query(
                    redis::cmd("HDEL")
                        .arg(running_key(&self.config.prefix))
                        .arg(&self.config.process),
                    self.config.timeout,
                )
                .await;
        }
    }

    /// Subscribes to the announcements (a cluster's nodes in turn), reporting when
    /// subscribing starts failing and when it works again.
    async fn subscribe(&mut self, channel: &str) -> Option<PubSubStream> {
        let attempt = self.subscriptions;
        self.subscriptions = self.subscriptions.wrapping_add(1);
        let subscribed = subscribe(&self.target, channel, self.config.timeout, attempt).await;
        let prefix = &self.config.prefix;
        match &subscribed {
            Ok(_) if self.unsubscribed => {
                self.unsubscribed = false;
                events::fleet_rules_subscribed(prefix);
            }
            Err(error) if !self.unsubscribed => {
                self.unsubscribed = true;
                events::fleet_rules_unsubscribed(prefix, &error.to_string());
            }
            Ok(_) | Err(_) => {}
        }
        let subscribed = subscribed.ok();
        let on = subscribed.is_some();
        self.shared.update(|s| s.subscribed = on);
        subscribed
    }

    /// One poll: reads the published version, applies a new one, reports this process's.
    async fn poll(&mut self) {
        match self.try_poll().await {
            Ok(()) => {
                if self.failing {
                    self.failing = false;
                    events::fleet_rules_reachable(&self.config.prefix);
                }
            }
            Err(error) => {
                self.link = None;
                let message = error.to_string();
                if !self.failing {
                    self.failing = true;
                    events::fleet_rules_unreachable(&self.config.prefix, &message);
                }
                events::fleet_rules_failed(&self.config.prefix);
                self.shared.update(|s| {
                    s.failures += 1;
                    s.last_error = Some(message);
                });
            }
        }
    }

    async fn try_poll(&mut self) -> Result<(), FleetRulesError> {
        let timeout = self.config.timeout;
        let key = rules_key(&self.config.prefix);
        let link = match &mut self.link {
            Some(link) => link,
            None => self
                .link
                .insert(Link::connect(&self.target, timeout).await?),
        };
        // A version with when it was published: a Redis that lost its data (restarted
        // without persistence) counts from 1 again, and its version 1 is not ours.
        let latest: (Option<u64>, Option<u64>) = link
            .query(
                redis::cmd("HMGET")
                    .arg(&key)
                    .arg("version")
                    .arg("published_ms"),
                timeout,
            )
            .await?;
        let latest = latest.0.zip(latest.1);
        if latest.is_some() && latest != self.applied && latest != self.refused {
            let (version, at, text): (Option<u64>, Option<u64>, Option<String>) = link
                .query(
                    redis::cmd("HMGET")
                        .arg(&key)
                        .arg("version")
                        .arg("published_ms")
                        .arg("rules"),
                    timeout,
                )
                .await?;
            if let (Some(version), Some(at), Some(text)) = (version, at, text) {
                self.apply((version, at), &text);
            }
        }
        let running = self.applied.map_or(0, |(version, _)| version);
        let report = format!("{running} {}", unix_ms());
        let running = redis::cmd("HSET")
            .arg(running_key(&self.config.prefix))
            .arg(&self.config.process)
            .arg(report)
            .clone();
        if let Some(link) = &mut self.link {
            let _: u64 = link.query(&running, timeout).await?;
        }
        Ok(())
    }

    /// Applies published `version` (its number and when it was published; its `text`) to
    /// the policy, or keeps the rules in force if it refuses them.
    fn apply(&mut self, version: (u64, u64), text: &str) {
        let prefix = &self.config.prefix;
        let number = version.0;
        if let Some((older, at)) = self.applied.filter(|&(_, at)| version.1 < at) {
            // Published before the version in force: Redis went back (a failover to a
            // replica behind, a restore). The published document is the fleet's rules all
            // the same; said, since it undoes a change.
            events::fleet_rules_went_back(prefix, number, older, at.saturating_sub(version.1));
        }
        match (self.apply)(text) {
            Ok(report) => {
                self.applied = Some(version);
                events::fleet_rules_applied(prefix, number, &report);
                self.shared.update(|s| {
                    s.version = Some(number);
                    s.latest = Some(number);
                    s.applied += 1;
                });
            }
            Err(error) => {
                self.refused = Some(version);
                let message = format!("version {number} refused: {error}");
                let kept = self.applied.map(|(kept, _)| kept);
                events::fleet_rules_refused(prefix, number, kept, &error);
                self.shared.update(|s| {
                    s.latest = Some(number);
                    s.refused += 1;
                    s.last_error = Some(message);
                });
            }
        }
    }
}

/// The next announcement; never, without a subscription.
async fn next(announcements: &mut Option<PubSubStream>) -> Option<redis::Msg> {
    match announcements {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}
