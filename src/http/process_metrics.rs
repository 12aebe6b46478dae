//! The standard process metrics every Prometheus client exports, read from `/proc/self` at each
//! scrape: `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`.
//! Three small reads of the kernel's own files, no crate and no thread; on a system without
//! `/proc` they are left out.

use std::fs;

/// Sets the process gauges from `/proc/self`; a value that cannot be read is left as it was.
pub fn record() {
    if let Some(seconds) = cpu_seconds() {
        // A counter in Prometheus's terms, kept in a gauge: the kernel counts it, and the
        // `metrics` counters only add.
        metrics::gauge!("process_cpu_seconds_total").set(seconds);
    }
    if let Some(bytes) = resident_bytes() {
        metrics::gauge!("process_resident_memory_bytes").set(bytes as f64);
    }
    if let Ok(fds) = fs::read_dir("/proc/self/fd") {
        // The directory's own handle, open while it is read, is one of them.
        let open = fds.count().saturating_sub(1);
        metrics::gauge!("process_open_fds").set(open as f64);
    }
}

/// User and system CPU time so far, in seconds: `/proc/self/stat`'s fields 14 and 15, in clock
/// ticks.
fn cpu_seconds() -> Option<f64> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    let ticks_per_second = sysconf(libc::_SC_CLK_TCK)?;
    Some(cpu_ticks(&stat)? as f64 / ticks_per_second as f64)
}

/// `utime + stime` of a `/proc/<pid>/stat` line. The command name (field 2) is in parentheses
/// and may hold spaces and parentheses itself: the fields are counted after its last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// Resident memory: `/proc/self/statm`'s second field, in pages.
fn resident_bytes() -> Option<u64> {
    let statm = fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * sysconf(libc::_SC_PAGESIZE)?)
}

/// A positive system setting.
fn sysconf(name: libc::c_int) -> Option<u64> {
    // SAFETY: `sysconf` only reads the setting `name` names; it takes no pointer.
    let value = unsafe { libc::sysconf(name) };
    u64::try_from(value).ok().filter(|v| *v > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_counted_after_the_command_name() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 3 0 9";
        assert_eq!(cpu_ticks(stat), Some(22));
        assert_eq!(cpu_ticks("4242 (x) S 1"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_its_own_numbers() {
        assert!(cpu_seconds().is_some());
        assert!(resident_bytes().is_some_and(|bytes| bytes > 0));
    }
}
