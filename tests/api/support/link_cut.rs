//! One TCP connection on loopback cut with `iptables`: every packet between its two local ports
//! dropped, both ways, while the processes at its ends go on and see nothing but silence (no
//! reset, no closed socket), as a network partition looks. Needs root and `iptables`
//! (`scripts/services haproxy` installs it); without either the test fails with the reason.

use std::process::Command;

/// The chain the rules go in: on loopback every packet passes it once, on its way in.
const CHAIN: &str = "INPUT";

/// The comment on every rule a test adds, followed by the test process's id: rules left by a
/// run that ended without removing them (killed) are found and removed.
const COMMENT_PREFIX: &str = "seckill-test-cut-";

/// Runs `iptables -w` (waiting for the lock other users of the tables hold) with `args`;
/// returns its standard error when it fails.
fn iptables(args: &[&str]) -> Result<String, String> {
    let output = Command::new("iptables")
        .arg("-w")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run iptables ({e}): apt-get install iptables"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "iptables {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Fails the test, with the reason, unless it can cut links here (as root, with `iptables`);
/// removes the rules of runs that have ended. A test calls it first, so it fails before it
/// starts anything when it could not cut.
pub fn prepare() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "cutting a link with iptables needs root: run this test as root"
    );
    let rules = iptables(&["-S", CHAIN])
        .unwrap_or_else(|reason| panic!("this test cuts a link with iptables: {reason}"));
    for rule in rules.lines() {
        let words: Vec<&str> = rule.split_whitespace().collect();
        let ended = words
            .iter()
            .find_map(|word| word.trim_matches('"').strip_prefix(COMMENT_PREFIX))
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
        if ended && let ["-A", chain, spec @ ..] = &words[..] {
            let mut args = vec!["-D", *chain];
            args.extend(spec.iter().map(|word| word.trim_matches('"')));
            let _ = iptables(&args);
        }
    }
}

/// A connection cut: its rules are removed when dropped, a failing test's too.
pub struct LinkCut {
    /// The rules added, each as the arguments after the chain.
    rules: Vec<Vec<String>>,
}

impl LinkCut {
    /// Drops every packet on loopback from local port `a` to local port `b` and back. Fails the
    /// test, with the reason, when the rules cannot be added.
    pub fn between(a: u16, b: u16) -> Self {
        prepare();
        let comment = format!("{COMMENT_PREFIX}{}", std::process::id());
        let mut cut = Self { rules: Vec::new() };
        for (from, to) in [(a, b), (b, a)] {
            let (from, to) = (from.to_string(), to.to_string());
            let rule = [
                "-i",
                "lo",
                "-p",
                "tcp",
                "--sport",
                from.as_str(),
                "--dport",
                to.as_str(),
                "-m",
                "comment",
                "--comment",
                comment.as_str(),
                "-j",
                "DROP",
            ]
            .map(String::from)
            .to_vec();
            let mut args = vec!["-I", CHAIN, "1"];
            args.extend(rule.iter().map(String::as_str));
            if let Err(reason) = iptables(&args) {
                panic!("cannot cut 127.0.0.1:{a} <-> 127.0.0.1:{b}: {reason}");
            }
            cut.rules.push(rule);
        }
        cut
    }
}

impl Drop for LinkCut {
    fn drop(&mut self) {
        for rule in &self.rules {
            let mut args = vec!["-D", CHAIN];
            args.extend(rule.iter().map(String::as_str));
            if let Err(reason) = iptables(&args) {
                eprintln!("removing a link cut: {reason}");
            }
        }
    }
}
