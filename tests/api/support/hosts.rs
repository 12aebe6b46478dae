//! The hosts of a deployment test: network namespaces of the test's own (`ip netns`), each with
//! an address on a private bridge the test's own namespace is on too, so the test reaches every
//! host and the hosts reach each other as machines on one network would. Where namespaces
//! cannot be made (no root, no `ip`), every host is this machine's loopback instead, and the
//! test says so on its standard error (never silently).

use std::io::Write;
use std::net::Ipv4Addr;
use std::process::Command;

/// One host: a network namespace, or this machine.
pub struct Host {
    /// The namespace, when the host is one; processes are started in it with `ip netns exec`.
    netns: Option<String>,
    /// The host's address: services started on it listen there, and the test reaches it there.
    pub ip: Ipv4Addr,
}

impl Host {
    /// The command prefix that runs a program on this host (empty on this machine).
    pub fn prefix(&self) -> Vec<String> {
        match &self.netns {
            Some(netns) => ["ip", "netns", "exec", netns].map(String::from).to_vec(),
            None => Vec::new(),
        }
    }
}

/// The namespaces and the bridge of one test, removed when dropped (a failing test too).
pub struct Network {
    /// The bridge every host's link is on, when the hosts are namespaces.
    bridge: Option<String>,
    /// The namespaces made, to remove.
    namespaces: Vec<String>,
}

/// The prefix of every namespace and bridge name a test makes, followed by the test process's
/// id: names are unique per run, and those of ended runs are found and removed.
const NAME_PREFIX: &str = "skh";

impl Network {
    /// One host per name in `names`: namespaces when this machine allows them, else this
    /// machine's loopback for all (said on standard error with the reason).
    pub fn hosts(names: &[&str]) -> (Self, Vec<Host>) {
        remove_stale();
        let mut network = Self {
            bridge: None,
            namespaces: Vec::new(),
        };
        match network.make(names) {
            Ok(hosts) => {
                say(&format!(
                    "hosts {} are network namespaces on the bridge {} ({}.0/24)",
                    names.join(", "),
                    network.bridge.as_deref().unwrap_or_default(),
                    subnet()
                ));
                (network, hosts)
            }
            Err(reason) => {
                network.remove();
                say(&format!(
                    "NOT ACROSS HOSTS: network namespaces cannot be made here ({reason}); hosts \
                     {} all run on this machine's loopback instead",
                    names.join(", ")
                ));
                let hosts = names
                    .iter()
                    .map(|_| Host {
                        netns: None,
                        ip: Ipv4Addr::LOCALHOST,
                    })
                    .collect();
                (network, hosts)
            }
        }
    }

    /// Makes the bridge (with the test's own address, `.1`) and a namespace per name, linked
    /// to it by a veth pair, with the addresses `.2`, `.3`, … in name order.
    fn make(&mut self, names: &[&str]) -> Result<Vec<Host>, String> {
        let id = std::process::id();
        let bridge = format!("{NAME_PREFIX}{id}b");
        run(&["ip", "link", "add", &bridge, "type", "bridge"])?;
        self.bridge = Some(bridge.clone());
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{}.1/24", subnet()),
            "dev",
            &bridge,
        ])?;
        run(&["ip", "link", "set", &bridge, "up"])?;
        let mut hosts = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let netns = format!("{NAME_PREFIX}{id}-{name}");
            run(&["ip", "netns", "add", &netns])?;
            self.namespaces.push(netns.clone());
            let (outside, inside) = (
                format!("{NAME_PREFIX}{id}v{i}"),
                format!("{NAME_PREFIX}{id}p{i}"),
            );
            run(&[
                "ip", "link", "add", &outside, "type", "veth", "peer", "name", &inside,
            ])?;
            run(&["ip", "link", "set", &outside, "master", &bridge, "up"])?;
            run(&["ip", "link", "set", &inside, "netns", &netns])?;
            let ip = Ipv4Addr::from(u32::from(subnet_base()) + 2 + i as u32);
            let inside_ns = |args: &[&str]| {
                let mut words = vec!["ip", "netns", "exec", &netns];
                words.extend_from_slice(args);
                run(&words)
            };
            inside_ns(&["ip", "link", "set", "lo", "up"])?;
            inside_ns(&["ip", "link", "set", &inside, "name", "eth0"])?;
            inside_ns(&["ip", "addr", "add", &format!("{ip}/24"), "dev", "eth0"])?;
            inside_ns(&["ip", "link", "set", "eth0", "up"])?;
            hosts.push(Host {
                netns: Some(netns),
                ip,
            });
        }
        Ok(hosts)
    }

    /// Removes the namespaces (their veth pairs go with them), after killing what still runs
    /// in them (what a backend started on its own, as RabbitMQ's `epmd`), and the bridge.
    fn remove(&mut self) {
        for netns in self.namespaces.drain(..) {
            let pids = Command::new("ip").args(["netns", "pids", &netns]).output();
            let pids = pids.map(|out| String::from_utf8_lossy(&out.stdout).into_owned());
            for pid in pids.unwrap_or_default().lines() {
                if let Ok(pid) = pid.trim().parse::<i32>() {
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            let _ = run(&["ip", "netns", "del", &netns]);
        }
        if let Some(bridge) = self.bridge.take() {
            let _ = run(&["ip", "link", "del", &bridge]);
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The private /24 of this run's hosts, in 10.199.0.0/16 by the test process's id (the first
/// three octets).
fn subnet() -> String {
    let base = subnet_base().octets();
    format!("{}.{}.{}", base[0], base[1], base[2])
}

fn subnet_base() -> Ipv4Addr {
    Ipv4Addr::new(10, 199, (std::process::id() % 250) as u8 + 1, 0)
}

/// Runs a command to its end; its standard error as the reason when it fails.
fn run(words: &[&str]) -> Result<(), String> {
    let output = Command::new(words[0])
        .args(&words[1..])
        .output()
        .map_err(|e| format!("{}: {e}", words.join(" ")))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{}: {}",
        words.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    ))
}

/// Namespaces and bridges left by runs of this test binary that have ended (killed before
/// they could remove them).
fn remove_stale() {
    let ended = |name: &str| {
        name.strip_prefix(NAME_PREFIX)
            .map(|rest| {
                rest.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    };
    let listed = |words: &[&str]| {
        Command::new(words[0])
            .args(&words[1..])
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default()
    };
    for line in listed(&["ip", "netns", "list"]).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        if ended(name) {
            let _ = run(&["ip", "netns", "del", name]);
        }
    }
    for line in listed(&["ip", "-o", "link", "show", "type", "bridge"]).lines() {
        let name = line.split(':').nth(1).unwrap_or_default().trim();
        if ended(name) {
            let _ = run(&["ip", "link", "del", name]);
        }
    }
}

/// A line on the test's standard error, shown whether the test passes or fails (the test
/// harness captures only `print!` and `eprint!`).
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "deployment test: {line}");
}
