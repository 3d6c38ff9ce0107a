//! [`Engine`]: one decision for every front end — the gRPC service and the HTTP API ask it
//! the same [`Ask`] and render the same [`Verdict`]: the domain's descriptors resolved to
//! their limits (Envoy ratelimit's matching, `replaces`, `unlimited`, `shadow_mode`), the
//! limited ones decided all or nothing in one store call, shadow ones reported and never
//! enforced, negative hits given back; and the rules, reloadable while it serves.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};

use arc_swap::ArcSwap;
use arrayvec::ArrayVec;
use tollgate::policy::{
    BatchDecision, BatchError, ListBounds, RateLimitHeaders, Request, TierOutcome, MAX_TIERS,
};

use crate::answer::{
    count, Ask, ClientError, ClientState, Code, LimitedDescriptor, LimitedList, LimitedTier,
    Refusal, ReloadError, Status, TierState, Verdict, MAX_DESCRIPTORS, MAX_ENTRIES,
};
use crate::config::{client_key, is_replaced, parse_client_key, Domains, Limit};
use crate::limiter::{Limiter, PROBE_RULE};

/// The rules in force, their source and version, and the policies deciding them.
pub(crate) struct Engine {
    /// Where the rules are read from (a file, or a directory of them).
    source: PathBuf,
    domains: ArcSwap<Domains>,
    /// Rules enforced: deny when over.
    enforced: Limiter,
    /// Rules in shadow mode: checked and reported, never denying.
    shadow: Limiter,
    /// 1 for the rules loaded at start, one more per applied reload.
    version: AtomicU64,
    /// One reload of the file at a time, its read included (a reload never waits for a
    /// check).
    reloading: tokio::sync::Mutex<()>,
    /// One application of new rules at a time, from the file or the fleet (held for the
    /// compile and the swap only: nothing in it waits).
    applying: std::sync::Mutex<()>,
    /// Whether the rules follow the fleet source (`--fleet-rules`): the file is then only
    /// where they start from, and a reload of it is refused.
    fleet: bool,
}

impl Engine {
    /// An engine on `domains` (read from `source`), deciding on `enforced` and `shadow`,
    /// which run [`rules_of`] `domains`.
    pub(crate) fn new(
        source: PathBuf,
        domains: Domains,
        enforced: Limiter,
        shadow: Limiter,
    ) -> Engine {
        Engine {
            source,
            domains: ArcSwap::from_pointee(domains),
            enforced,
            shadow,
            version: AtomicU64::new(1),
            reloading: tokio::sync::Mutex::new(()),
            applying: std::sync::Mutex::new(()),
            fleet: false,
        }
    }

    /// The engine whose rules follow the fleet source from now on (see
    /// [`apply_published`](Self::apply_published)).
    pub(crate) fn following_the_fleet(mut self) -> Engine {
        self.fleet = true;
        self
    }

    /// The rules in force.
    pub(crate) fn domains(&self) -> Arc<Domains> {
        self.domains.load_full()
    }

    /// The version of the rules in force.
    pub(crate) fn version(&self) -> u64 {
        // Relaxed: a number reported, ordered with nothing else.
        self.version.load(Ordering::Relaxed)
    }

    /// Where the rules are read from.
    pub(crate) fn source(&self) -> &std::path::Path {
        &self.source
    }

    /// Whether the store answers (readiness).
    pub(crate) async fn ready(&self) -> bool {
        self.enforced.probe().await
    }

    /// Reads the rules again and applies them: the version in force after, or why the old
    /// rules stay (a file that does not load changes nothing; rules that follow the fleet
    /// are changed by publishing, not here).
    pub(crate) async fn reload(&self) -> Result<u64, ReloadError> {
        let reloaded = if self.fleet {
            Err(ReloadError::FollowsTheFleet)
        } else {
            let _one = self.reloading.lock().await;
            self.reload_locked().await
        };
        let source = self.source.display().to_string();
        self.report(&source, &reloaded);
        reloaded
    }

    /// [`reload`](Self::reload), one at a time.
    async fn reload_locked(&self) -> Result<u64, ReloadError> {
        let source = self.source.clone();
        let domains = tokio::task::spawn_blocking(move || Domains::load(&source))
            .await
            .map_err(|e| ReloadError::Panicked(e.to_string()))?
            .map_err(ReloadError::Config)?;
        self.apply(domains)
    }

    /// Applies the rules a fleet published (`text`: [`Domains::published`]), on the fleet
    /// follower's thread: the version in force after, or why the old rules stay.
    pub(crate) fn apply_published(&self, text: &str) -> Result<u64, ReloadError> {
        let applied = Domains::from_published(text)
            .map_err(ReloadError::Config)
            .and_then(|domains| self.apply(domains));
        self.report("the fleet's published rules", &applied);
        applied
    }

    /// Logs the outcome of a reload from `source`, and counts a refusal the policy did not
    /// count.
    fn report(&self, source: &str, outcome: &Result<u64, ReloadError>) {
        match outcome {
            Ok(version) => tracing::info!(source, version, "rules reloaded"),
            Err(error) => {
                // The policy counts the refusals it makes; the others never reached it.
                if !matches!(error, ReloadError::Rules(_)) {
                    metrics::counter!("tollgate_policy_reloads_total", "outcome" => "refused")
                        .increment(1);
                }
                tracing::warn!(source, %error, "rules reload refused: the old rules stay");
            }
        }
    }

    /// Puts `domains` in force: the version after, or why the old rules stay.
    fn apply(&self, domains: Domains) -> Result<u64, ReloadError> {
        let _one = self.applying.lock().unwrap_or_else(PoisonError::into_inner);
        if domains.is_empty() && !self.domains.load().is_empty() {
            // A directory emptied by a deploy in progress, or a wrong path: refused
            // rather than every limit dropped at once.
            return Err(ReloadError::Empty);
        }
        let rules = rules_of(&domains);
        // The policies first: a request resolving a new descriptor meanwhile finds its
        // rule already there. The shadow policy takes the same rules (it only ever checks
        // the shadow ones), so the second reload cannot refuse what the first took; its
        // own report of that reload (event, `tollgate_policy_reloads_total`) is silenced,
        // or every reload would be reported twice.
        self.enforced.reload(&rules).map_err(ReloadError::Rules)?;
        let shadow = || self.shadow.reload(&rules);
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            metrics::with_local_recorder(&metrics::NoopRecorder, shadow)
        })
        .map_err(ReloadError::Rules)?;
        self.domains.store(Arc::new(domains));
        // Relaxed: the count is the only thing it orders, under `applying`.
        Ok(self.version.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Decides the question `ask_of` reads from `question` ([`decide`](Self::decide)) to
    /// its end on a task of its own: a caller that gives up while the store is awaited
    /// (Envoy's rate limit timeout, a client gone) drops only its wait, so a call is never
    /// left half done (its charge sent to Redis, its negative hits never given back), and
    /// is counted `cancelled` through `api`. On stores in this process, whose answers are
    /// ready at once (a call is decided whole in its first poll), it is decided here: no
    /// task.
    pub(crate) async fn decide_whole<Q: Send + Sync + 'static>(
        self: &Arc<Self>,
        api: &'static str,
        question: Q,
        ask_of: fn(&Q) -> Result<Ask<'_>, Refusal>,
    ) -> Result<Verdict, Refusal> {
        if !self.enforced.awaits() && !self.shadow.awaits() {
            return self.decide(&ask_of(&question)?).await;
        }
        let engine = Arc::clone(self);
        let decided = tokio::spawn(async move {
            let ask = ask_of(&question)?;
            engine.decide(&ask).await
        });
        let mut waiting = Cancelled(Some(api));
        let decided = decided.await;
        waiting.0 = None;
        match decided {
            Ok(verdict) => verdict,
            // Never aborted: a panic of the decision, as if it had run here.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// Decides `ask`.
    pub(crate) async fn decide(&self, ask: &Ask<'_>) -> Result<Verdict, Refusal> {
        if ask.domain.is_empty() {
            return Err(Refusal::NoDomain);
        }
        if ask.descriptors.is_empty() {
            return Err(Refusal::NoDescriptors);
        }
        if ask.descriptors.len() > MAX_DESCRIPTORS {
            return Err(Refusal::TooMany("descriptors", MAX_DESCRIPTORS));
        }
        let domains = self.domains.load();
        // Each descriptor's limit and cost.
        let mut limits: ArrayVec<Option<&Limit>, MAX_DESCRIPTORS> = ArrayVec::new();
        let mut costs: ArrayVec<u32, MAX_DESCRIPTORS> = ArrayVec::new();
        for (i, descriptor) in ask.descriptors.iter().enumerate() {
            if descriptor.entries.is_empty() {
                return Err(Refusal::EmptyDescriptor(i));
            }
            if descriptor.entries.len() > MAX_ENTRIES {
                return Err(Refusal::TooMany("entries in a descriptor", MAX_ENTRIES));
            }
            let hits = descriptor.hits.unwrap_or(u64::from(ask.hits));
            let cost = u32::try_from(hits).map_err(|_| Refusal::HitsTooLarge(i))?;
            costs.push(if descriptor.hits.is_none() && cost == 0 {
                1
            } else {
                cost
            });
            limits.push(domains.resolve(ask.domain, &descriptor.entries));
        }
        // A limit another matched limit replaces does not apply (each decided against
        // the limits as matched).
        let replaced: ArrayVec<bool, MAX_DESCRIPTORS> =
            (0..limits.len()).map(|i| is_replaced(&limits, i)).collect();
        for (limit, replaced) in limits.iter_mut().zip(replaced) {
            if replaced {
                *limit = None;
            }
        }
        // Every descriptor's concrete key, in one buffer.
        let (mut keys, mut key) = (String::new(), String::new());
        let mut spans: ArrayVec<(usize, usize), MAX_DESCRIPTORS> = ArrayVec::new();
        for descriptor in &ask.descriptors {
            // `client_key` writes a key of its own; each is appended to the others.
            client_key(ask.domain, &descriptor.entries, &mut key);
            let start = keys.len();
            keys.push_str(&key);
            spans.push((start, keys.len()));
        }
        let key = |i: usize| &keys[spans[i].0..spans[i].1];
        // Sorted into what is enforced, what is shadow, what is given back.
        let mut enforced: ArrayVec<(usize, Request<'_>), MAX_TIERS> = ArrayVec::new();
        let mut shadow: ArrayVec<(usize, Request<'_>), MAX_TIERS> = ArrayVec::new();
        let mut statuses: Vec<Status> = Vec::with_capacity(ask.descriptors.len());
        let mut refunds: ArrayVec<(&Limit, Request<'_>), MAX_DESCRIPTORS> = ArrayVec::new();
        let mut code_blocked = false;
        let limited = limits.iter().flatten().filter(|l| l.has_rule()).count();
        for (i, limit) in limits.iter().enumerate() {
            let Some(limit) = limit else {
                statuses.push(Status::NONE);
                continue;
            };
            statuses.push(Status::UNLIMITED);
            if limit.unlimited {
                continue;
            }
            if !limit.has_rule() {
                // Blocked (`requests_per_unit: 0`): over the limit for any cost but 0 —
                // reported OK in shadow mode.
                let over = costs[i] > 0 && !ask.descriptors[i].negative;
                let enforced = over && !limit.shadow_mode;
                statuses[i] = self.blocked(limit, enforced);
                code_blocked |= enforced;
                continue;
            }
            let request = Request::new(key(i), &limit.endpoint, costs[i]);
            if ask.descriptors[i].negative {
                // Given back once the call is known to be decided, not refused.
                refunds.push((limit, request));
                statuses[i] = status(limit, &[], None);
                continue;
            }
            let batch = if limit.shadow_mode {
                &mut shadow
            } else {
                &mut enforced
            };
            batch
                .try_push((i, request))
                .map_err(|_| Refusal::TooManyTiers(limited))?;
        }
        // Both batches' sizes first: the enforced one keeps its permits once decided, so a
        // shadow batch refused after it would charge a call answered as refused.
        for batch in [&enforced, &shadow] {
            if tiers_of(batch, &limits) > MAX_TIERS {
                return Err(Refusal::TooManyTiers(limited));
            }
        }
        let decided = decide_batch(&self.enforced, &enforced).await?;
        let reported = decide_batch(&self.shadow, &shadow).await?;
        for (limit, request) in &refunds {
            self.limiter(limit).refund(request).await;
        }
        let mut headers = ArrayVec::new();
        if let Some(batch) = &decided {
            let tiers = batch.decision.tiers();
            if !tiers.is_empty() {
                headers.push(("RateLimit-Policy", RateLimitHeaders::policy_value(tiers)));
                headers.push(("RateLimit", RateLimitHeaders::limit_value(tiers)));
                if let Some(retry) = RateLimitHeaders::retry_after(&batch.decision.decision) {
                    headers.push(("Retry-After", retry));
                }
            }
        }
        let mut code = if code_blocked {
            Code::OverLimit
        } else {
            Code::Ok
        };
        for (batch, members, limiter, enforcing) in [
            (&decided, &enforced, &self.enforced, true),
            (&reported, &shadow, &self.shadow, false),
        ] {
            for (n, (i, request)) in members.iter().enumerate() {
                let Some(limit) = limits[*i] else { continue };
                let mut s = match batch {
                    Some(batch) => {
                        let tiers: ArrayVec<&TierOutcome, MAX_TIERS> = batch.tiers_of(n).collect();
                        let over = tiers.iter().any(|t| !t.decision.allowed);
                        status(limit, &tiers, Some(over))
                    }
                    None => beyond_capacity(limiter, limit, request).await,
                };
                let over = s.code == Code::OverLimit;
                if over && !enforcing {
                    // Shadow mode: reported under the limit, never denying.
                    s.code = Code::Ok;
                }
                if s.code == Code::OverLimit {
                    code = Code::OverLimit;
                }
                statuses[*i] = s;
            }
        }
        Ok(Verdict {
            code,
            statuses,
            headers,
        })
    }

    /// The state of the client a descriptor of `domain` with `entries` is counted as,
    /// without charging it: `None` if no limit applies to it. With `reset`, the client's
    /// state is forgotten first (an operator lifting a wrong limit); `Err` names what
    /// failed (a refusal of the question, or a store that did not take the reset).
    pub(crate) async fn client(
        &self,
        domain: &str,
        entries: &[(&str, &str)],
        reset: bool,
    ) -> Result<Option<ClientState>, ClientError> {
        if domain.is_empty() {
            return Err(ClientError::Refused(Refusal::NoDomain));
        }
        if entries.is_empty() {
            return Err(ClientError::Refused(Refusal::EmptyDescriptor(0)));
        }
        if entries.len() > MAX_ENTRIES {
            return Err(ClientError::Refused(Refusal::TooMany(
                "entries in a descriptor",
                MAX_ENTRIES,
            )));
        }
        let domains = self.domains.load();
        let Some(limit) = domains.resolve(domain, entries) else {
            return Ok(None);
        };
        if limit.unlimited {
            return Ok(Some(ClientState::stateless(Status::UNLIMITED)));
        }
        if !limit.has_rule() {
            // Blocked: over the limit whatever the state (there is none).
            let blocked = self.blocked(limit, !limit.shadow_mode);
            return Ok(Some(ClientState::stateless(blocked)));
        }
        let mut key = String::new();
        client_key(domain, entries, &mut key);
        let limiter = self.limiter(limit);
        if reset && !limiter.reset(&Request::new(&key, &limit.endpoint, 0)).await {
            return Err(ClientError::StoreFailed);
        }
        let undecidable = |e: tollgate::InsufficientCapacity| {
            ClientError::Refused(Refusal::Undecidable(e.to_string()))
        };
        // The state (a cost of 0 takes and changes nothing), and whether one more request
        // would be admitted.
        let (now, one_more) = (
            Request::new(&key, &limit.endpoint, 0),
            Request::new(&key, &limit.endpoint, 1),
        );
        let state = limiter.read(&now).await.ok_or(ClientError::Unanswered)?;
        let next = limiter
            .read(&one_more)
            .await
            .ok_or(ClientError::Unanswered)?;
        let (state, next) = (state.map_err(undecidable)?, next.map_err(undecidable)?);
        let tiers: ArrayVec<&TierOutcome, MAX_TIERS> = state.tiers().iter().collect();
        let mut s = status(limit, &tiers, Some(!next.allowed() && !limit.shadow_mode));
        s.retry_after = (!next.allowed()).then(|| next.retry_after());
        Ok(Some(ClientState {
            status: s,
            tiers: tiers
                .iter()
                .map(|t| TierState {
                    name: t.name().into(),
                    quota: t.quota(),
                    remaining: t.decision.remaining,
                    reset_after: t.decision.reset_after,
                })
                .collect(),
        }))
    }

    /// At most `max` clients a check would deny now under an enforced limit, by descriptor
    /// (the work bounded by `tollgate::policy::Policy::limited`'s bounds): `None`
    /// if the store did not answer. A limit in shadow mode denies no one, so its clients
    /// are not listed; nor are the limits without state (unlimited, blocked).
    pub(crate) async fn limited(&self, max: usize) -> Option<LimitedList> {
        let listed = self.enforced.limited(ListBounds::new(max)).await?;
        let domains = self.domains.load();
        let mut clients = Vec::with_capacity(listed.clients.len());
        for client in listed.clients {
            let Some(limit) = domains.limit_of_rule(&client.rule) else {
                // The server's own probe rule, or a rule a reload has just removed.
                continue;
            };
            let Some((domain, entries)) = parse_client_key(&client.client) else {
                continue;
            };
            if limit.shadow_mode {
                continue;
            }
            let decision = &client.decision;
            clients.push(LimitedDescriptor {
                domain,
                entries,
                rule: client.rule.clone(),
                retry_after: decision.retry_after(),
                tiers: decision
                    .tiers()
                    .iter()
                    .map(|t| LimitedTier {
                        state: TierState {
                            name: t.name().into(),
                            quota: t.quota(),
                            remaining: t.decision.remaining,
                            reset_after: t.decision.reset_after,
                        },
                        denies: !t.decision.allowed,
                        retry_after: t.decision.retry_after,
                    })
                    .collect(),
            });
        }
        // By descriptor for the reader (the policy's order is by rule and client key,
        // whose length prefixes do not sort as the text).
        clients.sort_by(|a, b| {
            (&a.domain, &a.entries, &a.rule).cmp(&(&b.domain, &b.entries, &b.rule))
        });
        Some(LimitedList {
            clients,
            complete: listed.complete,
        })
    }

    /// The status of a descriptor under the blocked `limit` (`requests_per_unit: 0`,
    /// `over` if enforced): no state, so its reset is the end of its unit's window now,
    /// on the engine's clock, as the Go service reports it.
    fn blocked(&self, limit: &Limit, over: bool) -> Status {
        let mut status = status(limit, &[], Some(over));
        if let Some((_, unit)) = limit.current_limit.filter(|_| limit.blocked) {
            status.reset_after = Some(unit.until_window_end(self.limiter(limit).now()));
        }
        status
    }

    /// The policy `limit` is decided on.
    fn limiter(&self, limit: &Limit) -> &Limiter {
        if limit.shadow_mode {
            &self.shadow
        } else {
            &self.enforced
        }
    }
}

/// The tiers `members` (each its descriptor's index in `limits`) match together, as a
/// batch plans them: a client key two of them share under one limit counted once.
fn tiers_of(members: &[(usize, Request<'_>)], limits: &[Option<&Limit>]) -> usize {
    members
        .iter()
        .enumerate()
        .filter(|(n, (_, request))| {
            !members[..*n]
                .iter()
                .any(|(_, r)| r.endpoint == request.endpoint && r.client == request.client)
        })
        .filter_map(|(_, (i, _))| limits.get(*i).copied().flatten())
        .map(Limit::tier_count)
        .sum()
}

/// A call's wait for its answer: counted `cancelled` (through its api) if dropped while
/// armed, its caller gone.
struct Cancelled(Option<&'static str>);

impl Drop for Cancelled {
    fn drop(&mut self) {
        if let Some(api) = self.0 {
            count(api, "cancelled");
        }
    }
}

/// `members` decided as one on `limiter`: `Some` decision, `None` if their costs are more
/// than a limit can ever admit (over the limit, whatever the state), nothing to decide
/// answering an empty decision.
async fn decide_batch(
    limiter: &Limiter,
    members: &[(usize, Request<'_>)],
) -> Result<Option<BatchDecision>, Refusal> {
    let requests: ArrayVec<Request<'_>, MAX_TIERS> = members.iter().map(|(_, r)| *r).collect();
    match limiter.check_all(&requests).await {
        Ok(batch) => Ok(Some(batch)),
        Err(BatchError::Capacity(_)) => Ok(None),
        Err(BatchError::TooLarge { requests }) => Err(Refusal::TooManyTiers(requests)),
        // A kind of refusal this server does not know yet (the error is non-exhaustive).
        Err(other) => Err(Refusal::Undecidable(other.to_string())),
    }
}

/// The status of `request` under `limit`, a member of a batch refused whole because a
/// member's cost is more than its limit can ever admit: over the limit if its own cost is,
/// or if its limit would deny it now, else under it; either way with its state as it is (a
/// read: nothing was taken).
async fn beyond_capacity(limiter: &Limiter, limit: &Limit, request: &Request<'_>) -> Status {
    let over = limiter
        .peek(request)
        .await
        .map_or(true, |decision| !decision.allowed());
    let state = limiter
        .peek(&Request {
            cost: 0,
            ..*request
        })
        .await;
    let tiers: ArrayVec<&TierOutcome, MAX_TIERS> = match &state {
        Ok(state) => state.tiers().iter().collect(),
        Err(_) => ArrayVec::new(),
    };
    status(limit, &tiers, Some(over))
}

/// The status of a descriptor under `limit` whose tiers answered `tiers` (`over`: whether
/// it is over the limit; `None`: given back, not checked).
fn status(limit: &Limit, tiers: &[&TierOutcome], over: Option<bool>) -> Status {
    let tightest = tiers
        .iter()
        .min_by_key(|t| (t.decision.allowed, t.decision.remaining));
    let remaining = tightest.map_or(0, |t| t.decision.remaining);
    Status {
        code: if over == Some(true) {
            Code::OverLimit
        } else {
            Code::Ok
        },
        limit: limit
            .current_limit
            .map(|(requests, unit)| (limit.envoy_name.clone().unwrap_or_default(), requests, unit)),
        remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
        // A blocked limit's, which has no state, is the caller's (`Engine::blocked`).
        reset_after: tightest.map(|t| t.decision.reset_after),
        retry_after: tightest
            .filter(|t| !t.decision.allowed)
            .map(|t| t.decision.retry_after),
    }
}

/// The rules document of `domains`, with the readiness probe's rule.
pub(crate) fn rules_of(domains: &Domains) -> String {
    let mut rules = String::with_capacity(domains.rules_toml().len() + PROBE_RULE.len());
    rules.push_str(domains.rules_toml());
    rules.push_str(PROBE_RULE);
    tracing::debug!(%rules, "the rules compiled");
    rules
}
