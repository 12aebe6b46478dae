//! The CPU time other processes on this machine spend while the crowd runs (the server, Redis),
//! per request: on a machine whose cores the load generator shares, the rate alone says little,
//! and a process's own CPU per request is what compares across machines and runs.

use anyhow::Context;
use std::collections::BTreeMap;

/// The unit of `/proc/PID/stat`'s times: `USER_HZ`, 100 on every Linux architecture in use.
const TICKS_PER_SEC: f64 = 100.0;

/// Processes watched over one run: their names and the CPU they had used when it began.
pub struct Watch(Vec<(u32, String, u64)>);

impl Watch {
    /// Reads each process's CPU so far; fails for a process that does not exist.
    pub fn start(pids: &[u32]) -> anyhow::Result<Self> {
        pids.iter()
            .map(|&pid| {
                let (name, ticks) = read(pid)?;
                Ok((pid, name, ticks))
            })
            .collect::<anyhow::Result<_>>()
            .map(Self)
    }

    /// Microseconds of CPU (user and system, every thread) each process spent since
    /// [`start`](Self::start), per one of `requests`, by process name (`seckill`,
    /// `redis-server`; the same name twice gets the pid added).
    pub fn per_request(&self, requests: u64) -> anyhow::Result<BTreeMap<String, f64>> {
        let mut spent = BTreeMap::new();
        for (pid, name, before) in &self.0 {
            let (_, after) = read(*pid)?;
            let micros = after.saturating_sub(*before) as f64 / TICKS_PER_SEC * 1e6;
            let key = if spent.contains_key(name) {
                format!("{name} {pid}")
            } else {
                name.clone()
            };
            spent.insert(key, micros / requests.max(1) as f64);
        }
        Ok(spent)
    }
}

/// A process's name and its user and system time so far, in ticks.
fn read(pid: u32) -> anyhow::Result<(String, u64)> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse(&stat).with_context(|| format!("{path} is not as expected"))
}

/// `PID (NAME) STATE …`: the name may hold spaces and parentheses, so the fields are counted
/// from its last `)`; `utime` and `stime` are the 14th and 15th fields.
fn parse(stat: &str) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_owned();
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_times_are_read_after_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 9 0 0 0 120 35 0 0 20 0 4 0 7";
        assert_eq!(parse(stat), Some(("a (b) c".to_owned(), 155)));
        assert_eq!(parse("4242 (short) S 1"), None);
    }

    #[test]
    fn this_process_is_watched_and_a_missing_one_is_refused() {
        let me = std::process::id();
        let watch = Watch::start(&[me]).unwrap();
        let spent = watch.per_request(10).unwrap();
        assert_eq!(spent.len(), 1);
        assert!(spent.values().all(|us| *us >= 0.0));
        assert!(Watch::start(&[u32::MAX]).is_err());
    }
}
