//! [`PenaltyState`]: where [`AdaptivePenalty`](super::AdaptivePenalty) keeps what it knows
//! of each client: tiers of one internal rule, run on a [`Store`] like any policy's, so
//! the state is in process on [`InProcess`](crate::policy::InProcess) and shared by the
//! fleet (a Redis key per client and tier, with a TTL) on a shared store.
//!
//! ```text
//! rule "tollgate:penalty", per client
//!   denials   fixed window: `denials` per `period`       a deny checks it; full = penalized
//!   cooldown  GCRA, 1 per `cooldown`, burst 1             charged once when penalized:
//!                                                          busy (reset_after > 0) until the end
//!   seen      GCRA, 1 per reward `window`, burst 1        admits once per window of activity
//!   standing  GCRA, 1 per `window`, burst `steps·N + 4`   +2 windows per active window, time
//!                                                          takes 1 per window: its debt
//!                                                          (reset_after) is the standing
//! ```
//!
//! `seen` and `standing` exist only with a reward. This module builds each plan and reads
//! each answer; the caller runs the plans on the store, blocking or awaited, so every
//! operation is written once.

use tollgate_core::Nanos;

use super::reward::RewardConfig;
use crate::policy::store::fingerprint;
use crate::policy::{
    Op, PenaltyConfig, PenaltyConfigError, Plan, PlannedTier, PolicyConfig, PolicyDecision,
    RuleSet, Store,
};

/// The internal rule's name (a store names its keys by it: `{prefix}:tollgate:penalty:…`).
pub(super) const RULE: &str = "tollgate:penalty";

/// Mixed into each client's fingerprint, so the penalty's keys never meet a policy's
/// (a store keeping per-process tables by algorithm, such as the Redis store's fallback,
/// may share a table between equal tiers).
const KEY_SALT: u64 = 0x7e4a_1c3b_95d2_f068;

/// The tiers of the internal rule, by index.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Part {
    Denials = 0,
    Cooldown = 1,
    Seen = 2,
    Standing = 3,
}

/// What a read of a client's state says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Reading {
    /// When its penalty ends (`None`: not penalized).
    pub(super) penalized_until: Option<Nanos>,
    /// Its standing: the debt of its `standing` tier (zero without a reward), which
    /// [`RewardConfig::step`] reads.
    pub(super) standing: Nanos,
    /// Whether the read marked this window's activity (a check's read with a reward, every
    /// tier admitting): never for a peek's, so a peek of a penalized client writes nothing.
    pub(super) marked: bool,
}

impl Reading {
    /// What a client the store could not be asked about is taken to be: neither
    /// penalized nor rewarded (the policy's own limits decide).
    pub(super) const UNKNOWN: Reading = Reading {
        penalized_until: None,
        standing: Nanos::ZERO,
        marked: false,
    };
}

/// The internal rule's compiled tiers (in-process tables allocated on first use).
#[derive(Debug)]
pub(super) struct PenaltyState {
    rules: RuleSet,
    rewarded: bool,
}

impl PenaltyState {
    /// The internal rule for `config` (and `reward`), keeping state for at most `capacity`
    /// clients per tier in process.
    pub(super) fn compile(
        config: &PenaltyConfig,
        reward: Option<&RewardConfig>,
        capacity: usize,
    ) -> Result<PenaltyState, PenaltyConfigError> {
        let ns = |n: Nanos| format!("{}ns", n.as_u64());
        let mut toml = format!(
            "capacity = {capacity}\n[[rules]]\nname = \"{RULE}\"\n\
             [[rules.tiers]]\nname = \"denials\"\nalgorithm = \"fixed_window\"\nlimit = {}\nwindow = \"{}\"\n\
             [[rules.tiers]]\nname = \"cooldown\"\nalgorithm = \"gcra\"\nlimit = 1\nwindow = \"{}\"\n",
            config.denials,
            ns(config.period),
            ns(config.cooldown),
        );
        if let Some(reward) = reward {
            toml.push_str(&format!(
                "[[rules.tiers]]\nname = \"seen\"\nalgorithm = \"gcra\"\nlimit = 1\nwindow = \"{w}\"\n\
                 [[rules.tiers]]\nname = \"standing\"\nalgorithm = \"gcra\"\nlimit = 1\nwindow = \"{w}\"\nburst = {}\n",
                reward.burst(),
                w = ns(reward.window),
            ));
        }
        let rules = PolicyConfig::from_toml(&toml)
            .and_then(|config| RuleSet::compile(&config))
            .map_err(|e| PenaltyConfigError::State(e.to_string()))?;
        Ok(PenaltyState {
            rules,
            rewarded: reward.is_some(),
        })
    }

    /// Bytes `store` holds in this process for the penalty's tiers (0 until first used;
    /// 0 on a store whose state lives elsewhere).
    pub(super) fn memory_bytes(&self, store: &impl Store) -> usize {
        self.rules.rules()[0]
            .tiers()
            .iter()
            .map(|t| store.memory_bytes(t))
            .sum()
    }

    /// A plan of `parts` (each with its cost) for `client`.
    pub(super) fn plan<'a>(&'a self, client: &'a str, parts: &[(Part, u32)]) -> Plan<'a> {
        let rule = &self.rules.rules()[0];
        let key = fingerprint(client) ^ KEY_SALT;
        let mut plan = Plan::new();
        for &(part, cost) in parts {
            if let Some(tier) = rule.tiers().get(part as usize) {
                plan.push(PlannedTier {
                    rule,
                    tier,
                    key,
                    client,
                    cost,
                });
            }
        }
        plan
    }

    /// How to read `client`'s state before `op` runs on the inner policy: a check also
    /// marks the window's activity (`seen`, then two windows of `standing`, all or
    /// nothing: once per window); a peek or charge only reads. `cooldown` is probed at
    /// cost 0, which always admits and reports its busy time.
    pub(super) fn read_plan<'a>(
        &'a self,
        op: Op,
        client: &'a str,
    ) -> (Op, Plan<'a>, &'static [Part]) {
        const MARK: [Part; 3] = [Part::Seen, Part::Standing, Part::Cooldown];
        const LOOK: [Part; 2] = [Part::Standing, Part::Cooldown];
        const PENALTY: [Part; 1] = [Part::Cooldown];
        match (op, self.rewarded) {
            (Op::Check, true) => (
                Op::Check,
                self.plan(
                    client,
                    &[(Part::Seen, 1), (Part::Standing, 2), (Part::Cooldown, 0)],
                ),
                &MARK,
            ),
            (Op::Peek | Op::Charge | Op::Refund | Op::Reset, true) => (
                Op::Peek,
                self.plan(client, &[(Part::Standing, 0), (Part::Cooldown, 0)]),
                &LOOK,
            ),
            (Op::Check | Op::Peek | Op::Charge | Op::Refund | Op::Reset, false) => (
                Op::Peek,
                self.plan(client, &[(Part::Cooldown, 0)]),
                &PENALTY,
            ),
        }
    }

    /// What `read` (the outcomes of [`read_plan`](Self::read_plan)'s plan, whose tiers
    /// are `parts`) says at `now`. A cost-0 probe of the cooldown always admits: a denied
    /// one is a failure policy's answer (the store is down, failing closed), which says
    /// nothing of the client: [`Reading::UNKNOWN`].
    pub(super) fn reading(&self, read: &PolicyDecision, parts: &[Part], now: Nanos) -> Reading {
        let mut reading = Reading::UNKNOWN;
        for (outcome, part) in read.tiers().iter().zip(parts) {
            let decision = &outcome.decision;
            match part {
                Part::Cooldown if !decision.allowed => return Reading::UNKNOWN,
                Part::Cooldown if decision.reset_after > Nanos::ZERO => {
                    reading.penalized_until = Some(now.saturating_add(decision.reset_after));
                }
                Part::Standing => reading.standing = decision.reset_after,
                Part::Cooldown | Part::Seen | Part::Denials => {}
            }
        }
        // Only a check's read marks (a peek's never writes).
        reading.marked =
            parts.contains(&Part::Seen) && read.tiers().iter().all(|t| t.decision.allowed);
        reading
    }

    /// The plan that counts one denial of `client`.
    pub(super) fn denial_plan<'a>(&'a self, client: &'a str) -> Plan<'a> {
        self.plan(client, &[(Part::Denials, 1)])
    }

    /// Whether the counted denial (the outcome of [`denial_plan`](Self::denial_plan)'s
    /// check) reached the threshold: the window is full now.
    pub(super) fn triggered(counted: &PolicyDecision) -> bool {
        counted
            .tiers()
            .first()
            .is_some_and(|t| t.decision.remaining == 0)
    }

    /// The plans that start `client`'s penalty now (its cooldown forgotten, then checked
    /// once, which records it: busy for exactly `cooldown` from now, the latest trigger
    /// winning; a check, not a charge, so two triggers racing between the two steps
    /// record one cooldown, not two) and take its standing away.
    pub(super) fn penalize_plans<'a>(&'a self, client: &'a str) -> (Plan<'a>, Plan<'a>) {
        let reset = if self.rewarded {
            self.plan(client, &[(Part::Cooldown, 0), (Part::Standing, 0)])
        } else {
            self.plan(client, &[(Part::Cooldown, 0)])
        };
        (reset, self.plan(client, &[(Part::Cooldown, 1)]))
    }

    /// The plan that takes `client`'s standing away (a deny short of a penalty), if there
    /// is a reward. Its `seen` mark stays: the window of the deny earns nothing.
    pub(super) fn forfeit_plan<'a>(&'a self, client: &'a str) -> Option<Plan<'a>> {
        self.rewarded
            .then(|| self.plan(client, &[(Part::Standing, 0)]))
    }

    /// The plan that forgets everything about `client` (reset by every tier).
    pub(super) fn lift_plan<'a>(&'a self, client: &'a str) -> Plan<'a> {
        self.plan(
            client,
            &[
                (Part::Denials, 0),
                (Part::Cooldown, 0),
                (Part::Seen, 0),
                (Part::Standing, 0),
            ],
        )
    }
}
