//! Quick, informal timing of the keyed limiter against a bare "hash → flat atomic array +
//! CAS" floor on this machine. Not a benchmark claim (the bench crate carries those).
//!
//! `cargo run --release -p tollgate --example keyed_speed -- [KEYS] [floor|tollgate|both]`

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tollgate::{Clock, Gcra, KeyedLimiter, Nanos, TscClock};

fn floor_gcra(cell: &AtomicU64, now: u64, interval: u64, tolerance: u64) -> bool {
    let mut tat = cell.load(Ordering::Relaxed);
    loop {
        let new = tat.max(now).saturating_add(interval);
        if new - now > tolerance {
            return false;
        }
        match cell.compare_exchange_weak(tat, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(actual) => tat = actual,
        }
    }
}

fn shuffled(n: u64) -> Vec<u64> {
    let mut keys: Vec<u64> = (0..n)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect();
    let mut state = 88_172_645_463_325_252u64;
    for i in (1..keys.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        keys.swap(i, (state % (i as u64 + 1)) as usize);
    }
    keys
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(100_000, |a| a.parse().expect("KEYS"));
    let which = args.next().unwrap_or_else(|| "both".into());
    let clock = TscClock::new();
    let gcra = Gcra::with_period(1, Nanos::new(1))
        .burst(1_000_000)
        .build()
        .expect("valid");
    let order = shuffled(n);
    let checks: u64 = std::env::var("CHECKS").map_or(20_000_000, |v| v.parse().expect("CHECKS"));
    let rounds = (checks / n).max(1) as usize;
    let mut admitted = 0u64;
    if which != "tollgate" {
        let hasher = foldhash::fast::RandomState::default();
        let len = (n as usize).next_power_of_two()
            * std::env::var("FLOORX").map_or(1, |v| v.parse::<usize>().expect("FLOORX"));
        let slots: Vec<AtomicU64> = (0..len).map(|_| AtomicU64::new(0)).collect();
        let mask = len as u64 - 1;
        let start = Instant::now();
        for _ in 0..rounds {
            for k in &order {
                let i = (hasher.hash_one(k) & mask) as usize;
                admitted += u64::from(floor_gcra(&slots[i], clock.now().as_u64(), 1, 1_000_000));
            }
        }
        let per = start.elapsed().as_nanos() as f64 / (rounds as f64 * n as f64);
        println!("floor    {n:>8} keys: {per:6.1} ns/check");
    }
    if which != "floor" {
        let limiter: KeyedLimiter<u64, Gcra, TscClock> = KeyedLimiter::builder(gcra)
            .capacity(n as usize)
            .clock(clock.clone())
            .build()
            .expect("valid");
        let start = Instant::now();
        for k in &order {
            admitted += u64::from(limiter.check(k).expect("room").allowed);
        }
        let insert = start.elapsed().as_nanos() as f64 / n as f64;
        let start = Instant::now();
        for _ in 0..rounds {
            for k in &order {
                admitted += u64::from(limiter.check(k).expect("room").allowed);
            }
        }
        let per = start.elapsed().as_nanos() as f64 / (rounds as f64 * n as f64);
        println!(
            "tollgate {n:>8} keys: {per:6.1} ns/check, {insert:.1} ns/first insert, {:.2} B/key, {:?}",
            limiter.memory_bytes() as f64 / n as f64,
            limiter.stats()
        );
    }
    std::hint::black_box(admitted);
}
