//! Redis servers of a test's own, for the tests that kill them: a single Redis (with or
//! without its append-only file) and a Redis Cluster of three masters with a replica each. Each
//! runs on free ports with a data directory of its own; the shared Redis (6379) and the shared
//! test cluster are never touched.

use std::process::Stdio;
use std::time::Duration;
use tempfile::TempDir;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// How a private Redis keeps its data across a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing: a restart comes back empty.
    None,
    /// The append-only file, written before each reply and synced to disk as `appendfsync`
    /// says: `everysec` or `always`.
    Aof(&'static str),
}

impl Persistence {
    /// `redis-server` options for it.
    fn args(self) -> Vec<&'static str> {
        match self {
            Self::None => vec!["--save", "", "--appendonly", "no"],
            Self::Aof(fsync) => vec!["--save", "", "--appendonly", "yes", "--appendfsync", fsync],
        }
    }
}

/// The `redis-server` binary; fails the test when it is not installed.
pub fn redis_server() -> String {
    let found = std::process::Command::new("which")
        .arg("redis-server")
        .output()
        .expect("running `which redis-server`");
    let binary = String::from_utf8_lossy(&found.stdout).trim().to_owned();
    assert!(
        found.status.success() && !binary.is_empty(),
        "this test needs redis-server on the PATH (scripts/services redis installs it)"
    );
    binary
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("finding a free port")
        .port()
}

/// Starts `redis-server` on `port` with its data in `dir` and `extra` options.
pub fn spawn(binary: &str, port: u16, dir: &std::path::Path, extra: &[&str]) -> Child {
    std::fs::create_dir_all(dir).unwrap();
    Command::new(binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--daemonize", "no", "--dir", dir.to_str().unwrap()])
        .args(extra)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {binary}: {e}"))
}

/// A plain connection to one node (never a cluster connection: the tests ask nodes about
/// themselves).
async fn node(port: u16) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))?
        .get_multiplexed_async_connection()
        .await
}

/// `args` sent to the node on `port`.
pub async fn ask<T: redis::FromRedisValue>(port: u16, args: &[&str]) -> redis::RedisResult<T> {
    let mut connection = node(port).await?;
    redis::cmd(args[0])
        .arg(&args[1..])
        .query_async(&mut connection)
        .await
}

/// Waits until the node on `port` answers PING (after loading its append-only file, when it
/// has one: it answers `LOADING` until then).
pub async fn wait_answering(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while ask::<String>(port, &["PING"]).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "redis-server did not answer on port {port} within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How far a master's one replica is behind it, as the master's `INFO replication` says.
#[derive(Clone, Copy, Debug)]
pub struct Lag {
    /// Bytes of the replication stream the master wrote that the replica has not acknowledged.
    pub bytes: i64,
    /// Seconds since the replica last acknowledged anything.
    pub ack_age_secs: i64,
}

/// Kills a server with SIGKILL, so it saves nothing on its way out.
pub async fn kill(server: &mut Child) {
    server.start_kill().unwrap();
    server.wait().await.unwrap();
}

/// One Redis server of a test's own.
pub struct PrivateRedis {
    /// The `redis-server` binary, to start it again.
    binary: String,
    /// Its free port, the same after a restart.
    port: u16,
    /// How it keeps its data across a restart.
    persistence: Persistence,
    /// Its data directory, removed with it.
    dir: TempDir,
    /// The running server.
    server: Child,
}

impl PrivateRedis {
    /// Starts `redis-server` on a free port, keeping its data as `persistence` says.
    pub async fn start(persistence: Persistence) -> Self {
        let binary = redis_server();
        let port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let server = spawn(&binary, port, dir.path(), &persistence.args());
        wait_answering(port).await;
        Self {
            binary,
            port,
            persistence,
            dir,
            server,
        }
    }

    /// A replica of `master` on a free port, without persistence, returned once it has
    /// loaded the master's data and follows its stream.
    pub async fn replica_of(master: &PrivateRedis) -> Self {
        let binary = redis_server();
        let port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let master_port = master.port.to_string();
        let mut args = Persistence::None.args();
        args.extend(["--replicaof", "127.0.0.1", &master_port]);
        let server = spawn(&binary, port, dir.path(), &args);
        wait_answering(port).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let info: String = ask(port, &["INFO", "replication"])
                .await
                .unwrap_or_default();
            if info.contains("master_link_status:up") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the replica on {port} did not sync with its master within 20 s:\n{info}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            binary,
            port,
            persistence: Persistence::None,
            dir,
            server,
        }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops (`SIGSTOP`) or resumes (`SIGCONT`) the server's process: stopped, it keeps its
    /// connections but answers nothing, as a replica whose host hangs.
    pub fn freeze(&self, frozen: bool) {
        let pid = self.server.id().expect("the Redis server runs") as libc::pid_t;
        let signal = if frozen { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: kill(2) only sends a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "signalling Redis");
    }

    /// Kills the server with SIGKILL and starts it again on the same port and data directory:
    /// it comes back with what its append-only file holds, or empty without one.
    pub async fn kill_and_restart(&mut self) {
        kill(&mut self.server).await;
        self.server = spawn(
            &self.binary,
            self.port,
            self.dir.path(),
            &self.persistence.args(),
        );
        wait_answering(self.port).await;
    }

    /// Kills the server with SIGKILL, for good.
    pub async fn stop(mut self) {
        kill(&mut self.server).await;
    }
}

/// A Redis Cluster of a test's own: three masters, each with one replica, a short node timeout
/// so a replica takes over a second or two after its master stops answering.
pub struct PrivateCluster {
    /// The `redis-server` binary, to start a killed node again.
    binary: String,
    /// The nodes' data directories, removed with the cluster.
    dir: TempDir,
    /// Every node's port and its process (`None` while killed).
    nodes: Vec<(u16, Option<Child>)>,
}

/// A master of a [`PrivateCluster`] that serves slots.
#[derive(Clone, Debug)]
pub struct Master {
    /// Its port.
    pub port: u16,
    /// Its node id.
    pub id: String,
    /// How many slots it serves.
    pub slots: usize,
}

/// The slot ranges a line of `CLUSTER NODES` (split at whitespace) says its node serves,
/// without the slots being moved to or from it (`[slot->-node]`, `[slot-<-node]`).
fn slot_ranges<'a>(
    fields: &'a [&'a str],
) -> impl Iterator<Item = std::ops::RangeInclusive<i64>> + 'a {
    fields[8..].iter().filter_map(|range| {
        let (low, high) = range.split_once('-').unwrap_or((range, range));
        Some(low.parse::<i64>().ok()?..=high.parse::<i64>().ok()?)
    })
}

/// The port of the node a line of `CLUSTER NODES` (split at whitespace) names.
fn node_port(fields: &[&str]) -> u16 {
    let address = fields[1].split('@').next().unwrap();
    address.rsplit(':').next().unwrap().parse().unwrap()
}

/// The last lines of a program's output, for a failure's message.
fn tail(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// How long a node may not answer before the others fail it over, in ms.
const NODE_TIMEOUT_MS: &str = "1000";

impl PrivateCluster {
    /// Starts six nodes, makes them a cluster with `redis-cli --cluster create
    /// --cluster-replicas 1`, and waits until every slot is served and every replica is in sync.
    pub async fn start() -> Self {
        let binary = redis_server();
        let dir = tempfile::tempdir().unwrap();
        let mut cluster = Self {
            binary,
            dir,
            nodes: Vec::new(),
        };
        for _ in 0..6 {
            let port = free_port();
            let server = cluster.spawn_node(port);
            cluster.nodes.push((port, Some(server)));
        }
        for (port, _) in &cluster.nodes {
            wait_answering(*port).await;
        }
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .await
            .expect("running redis-cli --cluster create");
        assert!(
            created.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&created.stderr)
        );
        cluster.wait_whole().await;
        cluster
    }

    fn spawn_node(&self, port: u16) -> Child {
        let dir = self.dir.path().join(port.to_string());
        spawn(
            &self.binary,
            port,
            &dir,
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                NODE_TIMEOUT_MS,
                "--save",
                "",
                "--appendonly",
                "no",
            ],
        )
    }

    /// The cluster URL naming every node as a seed.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// Ports of the nodes running now.
    fn running(&self) -> impl Iterator<Item = u16> + '_ {
        self.nodes
            .iter()
            .filter(|(_, server)| server.is_some())
            .map(|(port, _)| *port)
    }

    /// Waits until every running node sees the cluster as `ok` and every running replica is in
    /// sync with its master.
    pub async fn wait_whole(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut whole = true;
            for port in self.running() {
                let info: String = ask(port, &["CLUSTER", "INFO"]).await.unwrap_or_default();
                let replication: String = ask(port, &["INFO", "replication"])
                    .await
                    .unwrap_or_default();
                whole &= info.contains("cluster_state:ok")
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"));
            }
            if whole {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the private Redis Cluster was not whole within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The port of the master that serves `key`'s slot now, as the running nodes see it.
    pub async fn master_of(&self, key: &str) -> u16 {
        self.live_master_of(key)
            .await
            .unwrap_or_else(|| panic!("no live master serves {key}"))
    }

    /// The port of the live master that serves `key`'s slot, if one does (none between a
    /// master's failure and its replica's promotion).
    async fn live_master_of(&self, key: &str) -> Option<u16> {
        let asked = self.running().next().expect("a running node");
        let slot: i64 = ask(asked, &["CLUSTER", "KEYSLOT", key]).await.unwrap();
        let nodes: String = ask(asked, &["CLUSTER", "NODES"]).await.unwrap();
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields[2];
            if !flags.contains("master") || flags.contains("fail") {
                continue;
            }
            if slot_ranges(&fields).any(|range| range.contains(&slot)) {
                return Some(node_port(&fields));
            }
        }
        None
    }

    /// The masters that serve slots now, as the first running node sees them (a master left
    /// without slots is not one of them).
    pub async fn masters(&self) -> Vec<Master> {
        let asked = self.running().next().expect("a running node");
        let nodes: String = ask(asked, &["CLUSTER", "NODES"]).await.unwrap();
        let mut masters: Vec<Master> = nodes
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .filter(|fields| fields[2].contains("master") && !fields[2].contains("fail"))
            .map(|fields| Master {
                port: node_port(&fields),
                id: fields[0].to_owned(),
                slots: slot_ranges(&fields).map(|range| range.count()).sum(),
            })
            .filter(|master| master.slots > 0)
            .collect();
        masters.sort_by_key(|master| master.port);
        masters
    }

    /// Moves every slot of the master `from` to the master `to`, keys and all, with `redis-cli
    /// --cluster reshard` (as an operator empties a node), while the processes go on using the
    /// cluster; returns once every node sees the cluster whole again.
    pub async fn reshard_all(&self, from: &Master, to: &Master) {
        let moved = Command::new("redis-cli")
            .arg("--cluster")
            .arg("reshard")
            .arg(format!("127.0.0.1:{}", to.port))
            .args(["--cluster-from", &from.id, "--cluster-to", &to.id])
            .args(["--cluster-slots", &from.slots.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .await
            .expect("running redis-cli --cluster reshard");
        assert!(
            moved.status.success(),
            "redis-cli --cluster reshard failed: {}{}",
            tail(&moved.stdout),
            String::from_utf8_lossy(&moved.stderr)
        );
        self.wait_whole().await;
    }

    /// The local port of the replication connection the master on `port` has from its one
    /// replica (`CLIENT LIST TYPE replica`): the master's replication stream flows from `port`
    /// to it.
    pub async fn replica_connection(&self, port: u16) -> u16 {
        let clients: String = ask(port, &["CLIENT", "LIST", "TYPE", "replica"])
            .await
            .unwrap();
        let ports: Vec<u16> = clients
            .lines()
            .filter_map(|line| {
                let addr = line
                    .split_whitespace()
                    .find_map(|f| f.strip_prefix("addr="))?;
                addr.rsplit(':').next()?.parse().ok()
            })
            .collect();
        match ports[..] {
            [replica] => replica,
            _ => panic!("127.0.0.1:{port} has not one replica connected: {clients:?}"),
        }
    }

    /// How far the one replica of the master on `port` is behind it.
    pub async fn replication_lag(&self, port: u16) -> Lag {
        let info: String = ask(port, &["INFO", "replication"]).await.unwrap();
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.trim().strip_prefix(name))
                .unwrap_or_else(|| panic!("no {name} in INFO replication: {info}"))
                .to_owned()
        };
        let written: i64 = field("master_repl_offset:").parse().unwrap();
        let replica = field("slave0:");
        let value = |name: &str| -> i64 {
            replica
                .split(',')
                .find_map(|pair| pair.strip_prefix(name))
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in slave0:{replica}"))
        };
        Lag {
            bytes: written - value("offset="),
            ack_age_secs: value("lag="),
        }
    }

    /// Kills the node on `port` with SIGKILL.
    pub async fn kill(&mut self, port: u16) {
        let (_, server) = self
            .nodes
            .iter_mut()
            .find(|(p, _)| *p == port)
            .expect("a node of this cluster");
        kill(server.as_mut().expect("a running node")).await;
        *server = None;
    }

    /// Waits until a node other than `old` serves `key`'s slot (its replica was promoted).
    /// Returns the new master's port.
    pub async fn wait_promoted(&self, key: &str, old: u16) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(master) = self.live_master_of(key).await
                && master != old
            {
                return master;
            }
            assert!(
                Instant::now() < deadline,
                "no replica took over from 127.0.0.1:{old} within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts the killed node on `port` again, as an operator would: it rejoins as a replica of
    /// the master that took over.
    pub async fn restart(&mut self, port: u16) {
        let server = self.spawn_node(port);
        let (_, slot) = self
            .nodes
            .iter_mut()
            .find(|(p, _)| *p == port)
            .expect("a node of this cluster");
        *slot = Some(server);
        wait_answering(port).await;
        self.wait_whole().await;
    }
}
