//! A budget of log lines for what any client can cause at will (a forged payment callback): a
//! few lines a second per process, and the lines left out counted and reported, so a flood
//! neither fills the disk nor drowns the lines that matter.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// At most `per_second` lines in each second; the lines over it are only counted.
#[derive(Debug)]
pub struct LogBudget {
    per_second: u32,
    window: Mutex<Window>,
}

/// The current second's count, and the lines left out since the last one written.
#[derive(Debug)]
struct Window {
    started: Instant,
    written: u32,
    left_out: u64,
}

impl LogBudget {
    /// A budget of `per_second` lines a second (at least 1).
    pub fn new(per_second: u32) -> Self {
        Self {
            per_second: per_second.max(1),
            window: Mutex::new(Window {
                started: Instant::now(),
                written: 0,
                left_out: 0,
            }),
        }
    }

    /// Whether one more line may be written at `now`: `Some` with the number of lines left out
    /// since the last one written (which that line reports), or `None`, the line counted as
    /// left out.
    pub fn line(&self, now: Instant) -> Option<u64> {
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        if now.saturating_duration_since(window.started) >= Duration::from_secs(1) {
            window.started = now;
            window.written = 0;
        }
        if window.written >= self.per_second {
            window.left_out += 1;
            return None;
        }
        window.written += 1;
        Some(std::mem::take(&mut window.left_out))
    }

    /// The lines left out since the last one written or reported, now reported (the count
    /// starts again): for a summary after a flood ends.
    pub fn take_left_out(&self) -> u64 {
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut window.left_out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_has_its_lines_and_the_next_written_one_reports_those_left_out() {
        let budget = LogBudget::new(3);
        let start = Instant::now();
        let lines: Vec<_> = (0..5).map(|_| budget.line(start)).collect();
        assert_eq!(lines, [Some(0), Some(0), Some(0), None, None]);
        let later = start + Duration::from_millis(999);
        assert_eq!(budget.line(later), None);
        let next_second = start + Duration::from_secs(1);
        assert_eq!(budget.line(next_second), Some(3));
        assert_eq!(budget.line(next_second), Some(0));
        assert_eq!(budget.line(next_second), Some(0));
        assert_eq!(budget.line(next_second), None);
        assert_eq!(budget.take_left_out(), 1);
        assert_eq!(budget.take_left_out(), 0);
    }
}
