//! What bounds a connection: how long it may take to send a request, how long it may idle, how
//! many may be open at once, which the process's open-file limit decides, and what the heads
//! of its requests may hold.

use super::heads::{HEAD_BUDGET, MAX_HEAD_BYTES};
use std::io;
use std::time::Duration;

/// How long a connection may go without a request before its buffers are given back.
pub const PARK_AFTER: Duration = Duration::from_secs(1);

/// Open connections past which a connection is parked as soon as it is between requests, not
/// after [`PARK_AFTER`]. While a crowd is arriving or busy, the buffers of every open
/// connection would add up to more than the rest of the server; parked at once, only the
/// connections with a request in progress keep theirs. Below this, a busy connection keeps its
/// buffers and saves making them again for every request.
pub const CROWD: usize = 1_000;

/// How long a client may take to send a request's head: from the moment a fresh connection is
/// accepted, and from the first byte of every later request. The same bound applies to a client
/// that stalls in the middle of a request's body or stops reading its answer. Without it, a
/// client that sends half a request, or nothing, holds a connection (and a file descriptor)
/// forever.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a keep-alive connection may wait for its next request, parked or not, before it is
/// closed. Long enough for a shopper who watches a countdown and clicks again.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// File descriptors left for everything that is not a client connection: the listener, the
/// database and Redis pools, RabbitMQ, SQLite's files, the runtime's own, and a margin for
/// connections being shed while new ones arrive.
pub const RESERVED_FILES: u64 = 256;

/// The deadlines and the cap every connection of one server lives under.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// See [`CROWD`].
    pub crowd: usize,
    /// See [`HEADER_READ_TIMEOUT`].
    pub header_read: Duration,
    /// See [`IDLE_TIMEOUT`].
    pub idle: Duration,
    /// Most connections open at once; unset, [`default_max_connections`].
    pub max_connections: Option<usize>,
    /// See [`MAX_HEAD_BYTES`].
    pub max_head: usize,
    /// See [`HEAD_BUDGET`].
    pub head_budget: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            crowd: CROWD,
            header_read: HEADER_READ_TIMEOUT,
            idle: IDLE_TIMEOUT,
            max_connections: None,
            max_head: MAX_HEAD_BYTES,
            head_budget: HEAD_BUDGET,
        }
    }
}

/// The process's limit on open files, as `getrlimit(RLIMIT_NOFILE)` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileLimit {
    /// The limit in force: opening a file past it fails with `EMFILE`.
    pub soft: u64,
    /// The most the soft limit may be raised to without privileges.
    pub hard: u64,
}

/// The process's open-file limit now.
pub fn file_limit() -> io::Result<FileLimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` through a pointer to a live, writable local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FileLimit {
        soft: limit.rlim_cur,
        hard: limit.rlim_max,
    })
}

/// Raises the soft open-file limit to the hard one, and returns the limit that results. Many
/// systems start a process with a soft limit of 1,024, which a crowd's connections exhaust
/// while the hard limit would allow far more.
pub fn raise_file_limit() -> io::Result<FileLimit> {
    let limit = file_limit()?;
    if limit.soft < limit.hard {
        let raised = libc::rlimit {
            rlim_cur: limit.hard,
            rlim_max: limit.hard,
        };
        // SAFETY: `setrlimit` reads one `rlimit` through a pointer to a live local.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    file_limit()
}

/// How many connections may be open at once under the current open-file limit: all of it but
/// [`RESERVED_FILES`], and never less than half of it.
pub fn default_max_connections() -> usize {
    let soft = file_limit().map_or(1_024, |limit| limit.soft);
    max_connections_under(soft)
}

fn max_connections_under(soft_limit: u64) -> usize {
    let cap = soft_limit
        .saturating_sub(RESERVED_FILES)
        .max(soft_limit / 2);
    usize::try_from(cap).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_leave_room_for_the_pools_and_files() {
        assert_eq!(max_connections_under(1_024), 1_024 - 256);
        assert_eq!(max_connections_under(65_536), 65_536 - 256);
        assert_eq!(max_connections_under(256), 128);
        assert!(
            max_connections_under(u64::MAX) > 1 << 40,
            "unlimited stays unlimited"
        );
    }

    #[test]
    fn the_soft_file_limit_is_raised_to_the_hard_one() {
        let before = file_limit().unwrap();
        let lowered = libc::rlimit {
            rlim_cur: before.soft.saturating_sub(1),
            rlim_max: before.hard,
        };
        // SAFETY: as in `raise_file_limit`. One less than before leaves the other tests of
        // this process their files.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) }, 0);
        let raised = raise_file_limit().unwrap();
        assert_eq!(raised.soft, before.hard);
        assert_eq!(raised.hard, before.hard);
    }
}
