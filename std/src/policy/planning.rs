//! Planning: how a request becomes a [`Plan`] under a rule set (the tiers of the rules it
//! matches, each with its key and the permits it charges), or the listing that decides it
//! with nothing planned; and the plans of the operations that only record (refund, charge,
//! reset).

use tollgate_core::InsufficientCapacity;

use super::rule::Special;
use super::store::fingerprint;
use super::{Op, Partition, Plan, PlannedTier, Request, Rule, RuleSet, Tier};

/// The permits a request charges a tier: `cost · divisor`, capped at what the tier can
/// ever admit (a penalized client can still get through, at the tier's whole burst).
#[inline]
pub(super) fn tier_cost(request: &Request<'_>, max_cost: u64) -> Result<u32, InsufficientCapacity> {
    let cost = u64::from(request.cost);
    if cost > max_cost {
        return Err(InsufficientCapacity {
            max_cost: max_cost / u64::from(request.divisor.max(1)),
        });
    }
    let scaled = cost.saturating_mul(u64::from(request.divisor.max(1)));
    // Truncation: clamped to u32::MAX just before.
    #[allow(clippy::cast_possible_truncation)]
    let scaled = scaled.min(max_cost).min(u64::from(u32::MAX)) as u32;
    Ok(scaled)
}

/// The plan of a refund, a charge or a reset (`op`) of `request`; `None` for no tier (or
/// an operation that decides).
pub(super) fn record_plan<'a>(op: Op, set: &'a RuleSet, request: &Request<'a>) -> Option<Plan<'a>> {
    match op {
        Op::Refund => refund_plan(set, request),
        Op::Charge => charge_plan(set, request),
        Op::Reset => reset_plan(set, request),
        Op::Check | Op::Peek => None,
    }
}

/// What a reset of `request` forgets: the client's key in each tier it matches but those
/// every client shares (a global rule's state is not the client's). `None`: no tier.
fn reset_plan<'a>(set: &'a RuleSet, request: &Request<'a>) -> Option<Plan<'a>> {
    let mut all = Plan::new();
    if !recorded(plan_into(&mut all, set, request, |_| Ok(0))) {
        return None;
    }
    let mut plan = Plan::new();
    for p in all
        .iter()
        .filter(|p| p.rule.partition() == Partition::Client)
    {
        plan.push(*p);
    }
    (!plan.is_empty()).then_some(plan)
}

/// What a charge of `request` records in each tier: the work already done, in full (not
/// capped at a tier's max cost: the key goes into debt and waits it out). `None`: no tier.
fn charge_plan<'a>(set: &'a RuleSet, request: &Request<'a>) -> Option<Plan<'a>> {
    let cost = request.cost.saturating_mul(request.divisor.max(1));
    let mut plan = Plan::new();
    (recorded(plan_into(&mut plan, set, request, |_| Ok(cost))) && !plan.is_empty()).then_some(plan)
}

/// What a refund of `request` gives back to each tier: giving back more than a tier can
/// ever hold is giving back all of it. `None`: no tier.
fn refund_plan<'a>(set: &'a RuleSet, request: &Request<'a>) -> Option<Plan<'a>> {
    let clamped = |tier: &Tier| {
        let clamped = Request {
            cost: request
                .cost
                .min(u32::try_from(tier.max_cost()).unwrap_or(u32::MAX)),
            ..*request
        };
        tier_cost(&clamped, tier.max_cost())
    };
    let mut plan = Plan::new();
    (recorded(plan_into(&mut plan, set, request, clamped)) && !plan.is_empty()).then_some(plan)
}

/// The plan of a check or peek of `request` under `set`: its tiers, each charged what
/// the request costs it (an error if more than the tier can ever admit); or the listing
/// that decides the request, with nothing planned.
#[inline(always)]
pub(super) fn plan_request<'a>(
    plan: &mut Plan<'a>,
    set: &'a RuleSet,
    request: &Request<'a>,
) -> Result<Option<u32>, InsufficientCapacity> {
    // Two rules of at most MAX_TIERS_PER_RULE tiers each always fit.
    let filled = plan_into(plan, set, request, |tier| {
        tier_cost(request, tier.max_cost())
    })?;
    Ok(match filled {
        Filled::Listed(at) => Some(at),
        Filled::All | Filled::Full => None,
    })
}

/// Whether `filled` leaves tiers to record (a refund, a charge or a reset of a listed
/// request records nothing: nothing was taken for it).
fn recorded(filled: Result<Filled, InsufficientCapacity>) -> bool {
    match filled {
        Ok(Filled::All | Filled::Full) => true,
        Ok(Filled::Listed(_)) | Err(_) => false,
    }
}

/// How [`plan_into`] filled a plan.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Filled {
    /// Every tier of the request is in (none, if no rule matched).
    All,
    /// The plan filled up before every tier was in (never for one request in an empty plan).
    Full,
    /// A list entry or a special rule decides the request (its index in the set's
    /// listings): nothing is planned for it.
    Listed(u32),
}

/// Fills `plan` with the tiers of `request` under `set`: every tier of every matching rule
/// (global-slot rule first), with the key under its rule and the permits `cost` charges
/// it. One fingerprint per request; built in place (no copy of the plan).
///
/// A list entry the client meets decides the request before any rule; then a ban in
/// either slot (the global slot's first); an `unlimited` rule plans no tier, and decides
/// the request when no rule of limits matched. A listed request has no tier planned.
#[inline(always)]
pub(super) fn plan_into<'a>(
    plan: &mut Plan<'a>,
    set: &'a RuleSet,
    request: &Request<'a>,
    cost: impl Fn(&Tier) -> Result<u32, InsufficientCapacity>,
) -> Result<Filled, InsufficientCapacity> {
    // One hash of the client: its state key, its lookup in the rule index and the lists.
    let client = fingerprint(request.client);
    if set.has_listings() {
        return plan_listed(plan, set, client, request, &cost);
    }
    let slots = set.matching_fingerprinted(request.client, client, request.endpoint);
    plan_slots(plan, slots, client, request, &cost)
}

/// [`plan_into`] under a set with list entries or special rules (kept out of the common
/// path, which then pays one branch for them), for the client whose fingerprint is
/// `client`.
#[inline(never)]
fn plan_listed<'a>(
    plan: &mut Plan<'a>,
    set: &'a RuleSet,
    client: u64,
    request: &Request<'a>,
    cost: &impl Fn(&Tier) -> Result<u32, InsufficientCapacity>,
) -> Result<Filled, InsufficientCapacity> {
    if let Some(listing) = set.listed(request.client, client) {
        return Ok(Filled::Listed(listing));
    }
    let [global, scoped] = set.matching_fingerprinted(request.client, client, request.endpoint);
    let specials = (
        global.and_then(Rule::special),
        scoped.and_then(Rule::special),
    );
    if let (Some(Special::Ban(at)), _) | (_, Some(Special::Ban(at))) = specials {
        return Ok(Filled::Listed(at));
    }
    let limits = [
        global.filter(|r| r.special().is_none()),
        scoped.filter(|r| r.special().is_none()),
    ];
    if let [None, None] = limits {
        if let (Some(Special::Unlimited(at)), _) | (_, Some(Special::Unlimited(at))) = specials {
            return Ok(Filled::Listed(at));
        }
        return Ok(Filled::All);
    }
    plan_slots(plan, limits, client, request, cost)
}

/// Appends the tiers of the rules in the two slots (`[global, scoped]`, either empty),
/// the global slot's first (see [`plan_into`]).
#[inline(always)]
fn plan_slots<'a>(
    plan: &mut Plan<'a>,
    [global, scoped]: [Option<&'a Rule>; 2],
    client: u64,
    request: &Request<'a>,
    cost: &impl Fn(&Tier) -> Result<u32, InsufficientCapacity>,
) -> Result<Filled, InsufficientCapacity> {
    // Each slot's rule in turn (written out, not an iterator over the pair: a check then
    // keeps no iterator state).
    if let Some(rule) = global {
        if !plan_rule(plan, rule, client, request, cost)? {
            return Ok(Filled::Full);
        }
    }
    if let Some(rule) = scoped {
        let all = plan_rule(plan, rule, client, request, cost)?;
        return Ok(if all { Filled::All } else { Filled::Full });
    }
    Ok(Filled::All)
}

/// Appends `rule`'s tiers to `plan` (see [`plan_into`]), the key under the rule being
/// that of the client whose fingerprint is `client`; `false` if the plan is full.
#[inline(always)]
fn plan_rule<'a>(
    plan: &mut Plan<'a>,
    rule: &'a Rule,
    client: u64,
    request: &Request<'a>,
    cost: &impl Fn(&Tier) -> Result<u32, InsufficientCapacity>,
) -> Result<bool, InsufficientCapacity> {
    let key = rule.key_id(client);
    for tier in rule.tiers() {
        let planned = PlannedTier {
            rule,
            tier,
            key,
            client: request.client,
            cost: cost(tier)?,
        };
        if !plan.push(planned) {
            return Ok(false);
        }
    }
    Ok(true)
}
