//! What each context counted, and the assertions on the counts (the same on QEMU and on a
//! host).

use crate::{handler_checks_at, END_TICK, EXPECTED_ADMITTED};

/// The checks one context made, by outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Checks that admitted a command.
    pub(crate) admitted: u32,
    /// Checks that refused one.
    pub(crate) denied: u32,
}

impl Tally {
    /// Counts one check's outcome.
    pub(crate) fn count(&mut self, allowed: bool) {
        if allowed {
            self.admitted += 1;
        } else {
            self.denied += 1;
        }
    }

    /// Every check this context made.
    pub(crate) fn checks(self) -> u32 {
        self.admitted + self.denied
    }
}

/// Checks the counts of a finished trace: exactly what GCRA allows admitted in all, every
/// tick checked, each context admitted and refused at least once. Says which failed.
pub(crate) fn verify(main: Tally, handler: Tally) -> Result<(), &'static str> {
    let handler_ticks = (0..=END_TICK).filter(|&t| handler_checks_at(t)).count();
    if u64::from(main.admitted) + u64::from(handler.admitted) != EXPECTED_ADMITTED {
        return Err("admitted in all != burst + elapsed / interval");
    }
    if usize::try_from(handler.checks()) != Ok(handler_ticks) {
        return Err("the handler did not check exactly once at each of its ticks");
    }
    if main.checks() <= END_TICK {
        return Err("main made fewer checks than there are ticks");
    }
    if main.admitted == 0 || main.denied == 0 {
        return Err("main was not both admitted and refused");
    }
    if handler.admitted == 0 || handler.denied == 0 {
        return Err("the handler was not both admitted and refused");
    }
    Ok(())
}
