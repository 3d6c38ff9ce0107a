//! One script call as it goes on the wire: [`Call`] (its keys and arguments in one buffer,
//! the tiers it covers), built from a plan or a lease; its [`Mode`] and mode argument with the
//! deadline ([`ModeArg`]).

use std::fmt::Write as _;

use arrayvec::{ArrayString, ArrayVec};

use super::RedisStore;
use crate::args::push_tier_spec;
use crate::keys::{push_tier_key, tag_hash, TierKey};
use crate::TimeSource;
use tollgate::policy::{Partition, Plan, MAX_TIERS};
use tollgate::Nanos;

/// What a script call is told to do (its mode argument's code): one of the policy's
/// operations ([`Op`](tollgate::policy::Op)), or a peek of a request another group of tiers
/// denied. The fallback runs the same modes in process.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Decide all, record all or nothing.
    Check,
    /// Decide all, record nothing.
    Peek,
    /// Decide all, record nothing, report admitting tiers at cost 0 (the request is denied
    /// elsewhere).
    PeekDenied,
    /// Give each tier's cost back.
    Refund,
    /// Record each tier's cost whatever the limits say.
    Charge,
    /// Delete each tier's state (a fresh key).
    Reset,
}

/// Only the fallback's tests run a policy operation as a mode directly; the store maps
/// each operation to its calls' modes itself (`operations.rs`).
#[cfg(test)]
impl From<tollgate::policy::Op> for Mode {
    fn from(op: tollgate::policy::Op) -> Mode {
        use tollgate::policy::Op;
        match op {
            Op::Check => Mode::Check,
            Op::Peek => Mode::Peek,
            Op::Refund => Mode::Refund,
            Op::Charge => Mode::Charge,
            Op::Reset => Mode::Reset,
        }
    }
}

impl Mode {
    /// Every operation's mode argument with a TTL slack of `ttl_slack_ms`, in the order of
    /// the variants (which [`Shared::mode`](super::Shared::mode) indexes by): its code and
    /// the slack (see `scripts/store.lua`).
    pub(super) fn modes(ttl_slack_ms: u128) -> [String; 6] {
        [
            Mode::Check,
            Mode::Peek,
            Mode::PeekDenied,
            Mode::Refund,
            Mode::Charge,
            Mode::Reset,
        ]
        .map(|op| format!("{}{}", op.code(), ttl_slack_ms))
    }

    fn code(self) -> &'static str {
        match self {
            Mode::Check => "c",
            Mode::Peek => "p",
            Mode::PeekDenied => "q",
            Mode::Refund => "r",
            Mode::Charge => "g",
            Mode::Reset => "x",
        }
    }
}

/// One script call: its keys and arguments, and which plan tiers it covers. Its texts lie
/// end to end in one buffer, so making a call allocates once.
#[derive(Clone)]
pub(super) struct Call {
    /// FNV-1a of the call's hash tag (the client, or `@`): its backoff group.
    pub(super) tag: u64,
    /// The keys, then the plan argument (the tiers' specs), then the client's time unless
    /// the server's is used (see `scripts/store.lua`); the mode, which
    /// [`RedisStore::call`](super::RedisStore::call) puts first, is not in it.
    text: String,
    /// Where each key ends in `text`.
    key_ends: ArrayVec<usize, MAX_TIERS>,
    /// Where the plan argument ends in `text` (the client's time, if any, follows).
    spec_end: usize,
    /// The plan tiers the call covers, in order (one per key).
    tiers: ArrayVec<usize, MAX_TIERS>,
}

impl Call {
    /// A call with no tiers yet, of the backoff group `tag`.
    fn new(tag: u64) -> Call {
        Call {
            tag,
            text: String::with_capacity(160),
            key_ends: ArrayVec::new(),
            spec_end: 0,
            tiers: ArrayVec::new(),
        }
    }

    /// Appends the key that ends `text` now, for plan tier `tier`; `false` if the call is
    /// full (a plan holds at most MAX_TIERS tiers, so it never is).
    fn push_key(&mut self, tier: usize) -> bool {
        if self.key_ends.is_full() {
            return false;
        }
        self.key_ends.push(self.text.len());
        self.tiers.push(tier);
        true
    }

    /// The plan tiers it covers.
    pub(super) fn tiers(&self) -> &[usize] {
        &self.tiers
    }

    /// Its keys, in order.
    pub(super) fn keys(&self) -> impl Iterator<Item = &str> {
        let starts = core::iter::once(0).chain(self.key_ends.iter().copied());
        starts
            .zip(&self.key_ends)
            .map(|(start, &end)| &self.text[start..end])
    }

    /// Its keys and arguments as the script takes them, `mode` first (see
    /// `scripts/store.lua`; the deadline, which the sender appends to the mode, is not in
    /// it).
    pub(super) fn script<'a>(&'a self, mode: &'a str) -> ScriptArgs<'a> {
        let keys_end = self.key_ends.last().copied().unwrap_or(0);
        ScriptArgs {
            keys: self.keys().collect(),
            mode,
            plan: &self.text[keys_end..self.spec_end],
            time: &self.text[self.spec_end..],
        }
    }
}

/// A call's keys and arguments, borrowed from it (see [`Call::script`]).
pub(super) struct ScriptArgs<'a> {
    keys: ArrayVec<&'a str, MAX_TIERS>,
    pub(super) mode: &'a str,
    plan: &'a str,
    /// The client's time, empty to use the server's.
    time: &'a str,
}

impl<'a> ScriptArgs<'a> {
    pub(super) fn keys(&self) -> &[&'a str] {
        &self.keys
    }

    /// The arguments with `mode` (the call's mode and deadline, see [`ModeArg`]) first:
    /// the mode, the plan, the client's time (if any).
    pub(super) fn args<'m>(&self, mode: &'m str) -> ([&'m str; 3], usize)
    where
        'a: 'm,
    {
        (
            [mode, self.plan, self.time],
            if self.time.is_empty() { 2 } else { 3 },
        )
    }
}

/// A call's mode argument with its deadline, on the stack (no allocation): the operation's
/// mode ([`Shared::mode`](super::Shared::mode): its code and the TTL slack, at most 15
/// bytes), a space and the deadline in ms (at most 20 digits).
pub(super) struct ModeArg(ArrayString<40>);

impl ModeArg {
    /// `mode` (its first 15 bytes), a space and `deadline_ms` in decimal.
    pub(super) fn new(mode: &str, deadline_ms: u64) -> ModeArg {
        let mut arg = ArrayString::new();
        // A mode is ASCII (a letter and digits): any prefix is whole characters.
        let mode = mode.get(..mode.len().min(15)).unwrap_or("");
        // At most 15 + 1 + 20 bytes: fits.
        let _ = write!(arg, "{mode} {deadline_ms}");
        ModeArg(arg)
    }

    pub(super) fn as_str(&self) -> &str {
        &self.0
    }
}

/// The calls of a plan: its client tiers', then its global tiers' (each group one slot);
/// on a Redis Cluster, a plan with several clients' tiers (a batch of requests,
/// `Policy::check_all`) has one call per further client too, so no call spans two slots.
pub(super) struct Calls {
    /// The (first) client's call and the global tiers' call.
    head: [Option<Call>; 2],
    /// Further clients' calls (a cluster only; empty, so not allocated, otherwise).
    more: Vec<Call>,
}

impl Calls {
    /// Every call: the first client's, the further clients', the global tiers'.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Call> {
        self.head[0]
            .iter()
            .chain(&self.more)
            .chain(self.head[1].iter())
    }
}

impl RedisStore {
    /// The calls `plan` needs (any operation: [`call`](Self::call) adds the mode), each
    /// with the tier indices it covers (see [`Calls`]).
    pub(super) fn calls(&self, plan: &Plan<'_>, now: Nanos) -> Calls {
        // A cluster: each client's tiers in a call of their own (their hash tag's slot).
        let by_client = self.shared.cluster;
        // Built in place (a call is a few hundred bytes: not moved around).
        let mut calls = Calls {
            head: [None, None],
            more: Vec::new(),
        };
        let prefix = self.shared.config.prefix();
        for (i, p) in plan.iter().enumerate() {
            let global = p.rule.partition() == Partition::Global;
            let call = if global {
                calls.head[1].get_or_insert_with(|| Call::new(tag_hash(p)))
            } else {
                let first = calls.head[0].get_or_insert_with(|| Call::new(tag_hash(p)));
                let tag = if by_client { tag_hash(p) } else { first.tag };
                if tag == first.tag {
                    first
                } else {
                    // Another client's tier, on a cluster.
                    match calls.more.iter().position(|c| c.tag == tag) {
                        Some(j) => &mut calls.more[j],
                        None => {
                            calls.more.push(Call::new(tag));
                            let last = calls.more.len() - 1;
                            &mut calls.more[last]
                        }
                    }
                }
            };
            if call.key_ends.is_full() {
                // A plan holds at most MAX_TIERS tiers.
                continue;
            }
            push_tier_key(&mut call.text, prefix, p);
            call.push_key(i);
        }
        let client_time = self.shared.config.time_source() == TimeSource::Client;
        let [first, global] = &mut calls.head;
        for call in first
            .iter_mut()
            .chain(&mut calls.more)
            .chain(global.iter_mut())
        {
            // The specs after the keys, in the same order.
            let keys_end = call.text.len();
            for &i in &call.tiers {
                if let Some(p) = plan.get(i) {
                    push_tier_spec(&mut call.text, keys_end, p.tier.algorithm(), p.cost);
                }
            }
            call.spec_end = call.text.len();
            if client_time {
                // Writing to a `String` cannot fail.
                let _ = write!(call.text, "{:016x}", now.as_u64());
            }
        }
        calls
    }

    /// The call of a lease operation of `cost` permits on `tier` at `now` (see
    /// [`lease_op`](Self::lease_op)).
    pub(super) fn lease_call(&self, tier: &TierKey, cost: u32, now: Nanos) -> Call {
        let mut call = Call::new(tier.tag);
        call.text.push_str(&tier.key);
        call.push_key(0);
        push_tier_spec(&mut call.text, tier.key.len(), &tier.algorithm, cost);
        call.spec_end = call.text.len();
        if self.shared.config.time_source() == TimeSource::Client {
            // Writing to a `String` cannot fail.
            let _ = write!(call.text, "{:016x}", now.as_u64());
        }
        call
    }
}

#[cfg(test)]
mod tests {
    use super::{Call, ModeArg};

    /// A call's keys, plan and time share one buffer: each comes back whole and in order,
    /// the mode first among the arguments, the time only if there is one.
    #[test]
    fn a_call_gives_back_its_keys_and_arguments() {
        let mut call = Call::new(7);
        for (i, key) in ["p:r:a:{c}", "p:r:b:{c}", "p:other:t:{c}"]
            .iter()
            .enumerate()
        {
            call.text.push_str(key);
            assert!(call.push_key(2 * i));
        }
        call.text.push_str("spec one;spec two;spec three");
        call.spec_end = call.text.len();
        let script = call.script("c1000");
        assert_eq!(script.keys(), ["p:r:a:{c}", "p:r:b:{c}", "p:other:t:{c}"]);
        let mode = ModeArg::new(script.mode, 1_700_000_000_000);
        assert_eq!(mode.as_str(), "c1000 1700000000000");
        let (args, n) = script.args(mode.as_str());
        assert_eq!(
            args[..n],
            ["c1000 1700000000000", "spec one;spec two;spec three"]
        );
        assert_eq!(
            ModeArg::new("g1099511627776", u64::MAX).as_str(),
            "g1099511627776 18446744073709551615"
        );
        assert_eq!(call.tiers(), [0, 2, 4]);
        assert_eq!(call.keys().count(), 3);
        // With the client's time after the plan.
        drop(script);
        call.text.push_str("00000000000003e8");
        let script = call.script("p1000");
        assert_eq!(script.keys().len(), 3);
        let (args, n) = script.args("p1000 9");
        assert_eq!(
            args[..n],
            [
                "p1000 9",
                "spec one;spec two;spec three",
                "00000000000003e8"
            ]
        );
        // One key.
        let mut one = Call::new(1);
        one.text.push('k');
        assert!(one.push_key(0));
        one.text.push('s');
        one.spec_end = 2;
        assert_eq!(one.script("r5").keys(), ["k"]);
        let script = one.script("r5");
        let (args, n) = script.args("r5 0");
        assert_eq!(args[..n], ["r5 0", "s"]);
    }
}
