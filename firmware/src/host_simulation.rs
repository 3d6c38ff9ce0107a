//! The trace on a host: `main`'s loop checking between ticks, with the SysTick handler's
//! work (advance the clock, check at odd ticks) simulated at each tick.

use crate::tally::{self, Tally};
use crate::{accept_command, handler_checks_at, END_TICK, EXPECTED_ADMITTED};

/// How many checks `main` makes between two ticks here (on the board: as many as it can).
const MAIN_CHECKS_PER_TICK: u32 = 3;

/// Runs the trace, prints the counts, and panics if [`tally::verify`] fails.
pub(crate) fn main() {
    let (mut main, mut handler) = (Tally::default(), Tally::default());
    for tick in 0..=END_TICK {
        // The handler runs first at each new tick: it moved the clock there.
        if handler_checks_at(tick) {
            handler.count(accept_command(tick));
        }
        for _ in 0..MAIN_CHECKS_PER_TICK {
            main.count(accept_command(tick));
        }
    }
    println!(
        "simulated {END_TICK} ticks: main admitted {} denied {}; SysTick admitted {} denied {}; \
         admitted {} of {EXPECTED_ADMITTED} expected",
        main.admitted,
        main.denied,
        handler.admitted,
        handler.denied,
        main.admitted + handler.admitted,
    );
    if let Err(failed) = tally::verify(main, handler) {
        panic!("{failed}");
    }
}
