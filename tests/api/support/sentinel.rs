//! A Redis Sentinel group of a test's own: a master, one replica and three sentinels
//! (`redis-server --sentinel`) on free ports, with data directories of their own, that fail a
//! master over a second or two after it stops answering. The shared Redis is never touched.

use super::private_redis::{ask, free_port, kill, redis_server, spawn, wait_answering};
use std::process::Stdio;
use std::time::Duration;
use tempfile::TempDir;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The name the sentinels know the master by.
pub const MASTER_NAME: &str = "seckill-test";

/// How long the master may not answer before a sentinel thinks it down, in ms.
const DOWN_AFTER_MS: u32 = 1000;

/// How many sentinels must agree the master is down (of three).
const QUORUM: u32 = 2;

/// Options of every Redis node: no persistence (a restarted node comes back empty, and syncs
/// from its master), and a replica's full sync started at once (not after Redis's default 5 s
/// wait for more replicas to join it).
const NODE_OPTIONS: [&str; 6] = [
    "--save",
    "",
    "--appendonly",
    "no",
    "--repl-diskless-sync-delay",
    "0",
];

/// A master, its replica and three sentinels watching them.
pub struct SentinelGroup {
    /// The `redis-server` binary, to start a killed node again.
    binary: String,
    /// The data directories and the sentinels' configuration files, removed with the group.
    dir: TempDir,
    /// The two Redis nodes' ports and processes (`None` while killed); the first starts as the
    /// master.
    nodes: Vec<(u16, Option<Child>)>,
    /// The sentinels' ports and processes.
    sentinels: Vec<(u16, Child)>,
}

impl SentinelGroup {
    /// Starts the master, its replica and three sentinels, and waits until the replica is in
    /// sync and every sentinel sees the master, the replica and a quorum of sentinels.
    pub async fn start() -> Self {
        let binary = redis_server();
        let dir = tempfile::tempdir().unwrap();
        let master = free_port();
        let replica = free_port();
        let mut group = Self {
            binary,
            dir,
            nodes: Vec::new(),
            sentinels: Vec::new(),
        };
        let master_node = group.spawn_node(master, None);
        group.nodes.push((master, Some(master_node)));
        wait_answering(master).await;
        let replica_node = group.spawn_node(replica, Some(master));
        group.nodes.push((replica, Some(replica_node)));
        wait_answering(replica).await;
        group.wait_replica_in_sync(replica, master).await;
        for _ in 0..3 {
            let port = free_port();
            let sentinel = group.spawn_sentinel(port, master);
            group.sentinels.push((port, sentinel));
        }
        for (port, _) in &group.sentinels {
            wait_answering(*port).await;
        }
        group.wait_watching(master).await;
        group
    }

    fn spawn_node(&self, port: u16, master: Option<u16>) -> Child {
        let dir = self.dir.path().join(port.to_string());
        let mut options = NODE_OPTIONS.to_vec();
        let master = master.map(|port| port.to_string());
        if let Some(master) = &master {
            options.extend(["--replicaof", "127.0.0.1", master]);
        }
        spawn(&self.binary, port, &dir, &options)
    }

    fn spawn_sentinel(&self, port: u16, master: u16) -> Child {
        let dir = self.dir.path().join(format!("sentinel-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {master} {QUORUM}\n\
                 sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {MASTER_NAME} 5000\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                dir = dir.display()
            ),
        )
        .unwrap();
        Command::new(&self.binary)
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {} --sentinel: {e}", self.binary))
    }

    /// The URL naming the three sentinels and the master's name.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", sentinels.join(","))
    }

    /// The master's port as every sentinel names it, once they agree.
    pub async fn master(&self) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut named = Vec::new();
            for (port, _) in &self.sentinels {
                let answer: Option<(String, u16)> =
                    ask(*port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])
                        .await
                        .unwrap_or_default();
                named.push(answer.map(|(_, port)| port));
            }
            if let Some(Some(first)) = named.first()
                && named.iter().all(|port| *port == Some(*first))
            {
                return *first;
            }
            assert!(
                Instant::now() < deadline,
                "the sentinels name different masters: {named:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills the node on `port` with SIGKILL.
    pub async fn kill(&mut self, port: u16) {
        let (_, node) = self
            .nodes
            .iter_mut()
            .find(|(p, _)| *p == port)
            .expect("a node of this group");
        kill(node.as_mut().expect("a running node")).await;
        *node = None;
    }

    /// Waits until every sentinel names a master other than `old` and that node says it is a
    /// master (its replica was promoted). Returns the new master's port.
    pub async fn wait_promoted(&self, old: u16) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut promoted = None;
            for (port, _) in &self.sentinels {
                let answer: Option<(String, u16)> =
                    ask(*port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])
                        .await
                        .unwrap_or_default();
                match answer {
                    Some((_, master)) if master != old && promoted.is_none_or(|p| p == master) => {
                        promoted = Some(master)
                    }
                    _ => {
                        promoted = None;
                        break;
                    }
                }
            }
            if let Some(master) = promoted {
                let replication: String = ask(master, &["INFO", "replication"])
                    .await
                    .unwrap_or_default();
                if replication.contains("role:master") {
                    return master;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the sentinels promoted no replica of 127.0.0.1:{old} within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts the killed node on `port` again as a replica of `master` (the one that took
    /// over), as an operator would; the sentinels would make it one too, but only after tens of
    /// seconds at times. Waits until it is in sync.
    pub async fn restart_as_replica(&mut self, port: u16, master: u16) {
        let node = self.spawn_node(port, Some(master));
        let (_, slot) = self
            .nodes
            .iter_mut()
            .find(|(p, _)| *p == port)
            .expect("a node of this group");
        *slot = Some(node);
        wait_answering(port).await;
        self.wait_replica_in_sync(port, master).await;
    }

    /// Waits until the node on `replica` replicates `master` with its link up.
    async fn wait_replica_in_sync(&self, replica: u16, master: u16) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let replication: String = ask(replica, &["INFO", "replication"])
                .await
                .unwrap_or_default();
            if replication.contains("role:slave")
                && replication.contains(&format!("master_port:{master}"))
                && replication.contains("master_link_status:up")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "127.0.0.1:{replica} was not an in-sync replica of 127.0.0.1:{master} within \
                 30 s:\n{replication}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every sentinel watches `master` with its replica and reaches a quorum able
    /// to fail it over (`SENTINEL CKQUORUM`).
    async fn wait_watching(&self, master: u16) {
        let deadline = Instant::now() + Duration::from_secs(30);
        'again: loop {
            assert!(
                Instant::now() < deadline,
                "the sentinels did not all watch 127.0.0.1:{master}, its replica and each \
                 other within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            for (port, _) in &self.sentinels {
                let quorum: redis::RedisResult<String> =
                    ask(*port, &["SENTINEL", "CKQUORUM", MASTER_NAME]).await;
                let replicas: Vec<redis::Value> =
                    ask(*port, &["SENTINEL", "REPLICAS", MASTER_NAME])
                        .await
                        .unwrap_or_default();
                let sentinels: Vec<redis::Value> =
                    ask(*port, &["SENTINEL", "SENTINELS", MASTER_NAME])
                        .await
                        .unwrap_or_default();
                if quorum.is_err() || replicas.is_empty() || sentinels.len() < 2 {
                    continue 'again;
                }
            }
            return;
        }
    }
}
