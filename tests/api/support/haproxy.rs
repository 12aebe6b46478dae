//! HAProxy as deployed: `deploy/haproxy.cfg`, unchanged, filled in by its environment
//! variables, terminating the clients' TLS with a certificate the test makes (a CA of its own
//! and a certificate for `127.0.0.1` signed by it), and its admin socket, where the test reads
//! which servers HAProxy sends traffic to.

use super::http::client_builder;
use super::private_redis::free_port;
use super::tls_servers::Certificates;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use tokio::time::Instant;

/// The load balancer's configuration the deployment ships.
const CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/haproxy.cfg");

/// A running HAProxy in front of the servers.
pub struct Haproxy {
    /// `https://127.0.0.1:PORT`, where clients connect.
    pub url: String,
    /// A client that trusts the test's CA (and nothing else).
    pub client: reqwest::Client,
    /// The admin socket.
    stats: PathBuf,
    /// The process.
    process: Child,
    /// The certificates, the socket and the log, removed with it.
    dir: TempDir,
}

impl Haproxy {
    /// Starts HAProxy with the shipped configuration in front of `servers` (`HOST:PORT` each,
    /// as many as the configuration names: two).
    pub async fn start(servers: &[String; 2], certs: &Certificates) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let pem = std::fs::read_to_string(certs.file("server.pem")).unwrap()
            + &std::fs::read_to_string(certs.file("server.key")).unwrap();
        std::fs::write(dir.path().join("shop.pem"), pem).unwrap();
        let ca = std::fs::read_to_string(certs.ca()).unwrap();
        let stats = dir.path().join("admin.sock");
        let bind = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.path().join("haproxy.log")).unwrap();
        let process = tokio::process::Command::new("haproxy")
            .args(["-f", CONFIG, "-db"])
            .env("SECKILL_HAPROXY_LOG", "stderr")
            .env("SECKILL_HAPROXY_BIND", &bind)
            .env("SECKILL_HAPROXY_PEM", dir.path().join("shop.pem"))
            .env("SECKILL_HAPROXY_STATS", &stats)
            .env("SECKILL_SERVER1", &servers[0])
            .env("SECKILL_SERVER2", &servers[1])
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("starting haproxy (scripts/services haproxy installs it)");
        let client = client_builder()
            .tls_certs_only([reqwest::Certificate::from_pem(ca.as_bytes()).unwrap()])
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let haproxy = Self {
            url: format!("https://{bind}"),
            client,
            stats,
            process,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while haproxy.show_stat().await.is_none() {
            assert!(
                Instant::now() < deadline,
                "HAProxy did not start within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        haproxy
    }

    /// `show stat` from the admin socket, when it answers.
    async fn show_stat(&self) -> Option<String> {
        let mut socket = tokio::net::UnixStream::connect(&self.stats).await.ok()?;
        socket.write_all(b"show stat\n").await.ok()?;
        let mut answer = String::new();
        socket.read_to_string(&mut answer).await.ok()?;
        Some(answer)
    }

    /// The state HAProxy gives `server` in `backend` (`UP`, `DOWN`, `UP 1/2`, …) and its last
    /// health check's result (`L7OK 200`, `L7STS 404`, `L4CON`, …).
    pub async fn status(&self, backend: &str, server: &str) -> (String, String) {
        let stat = self.show_stat().await.unwrap_or_default();
        stat.lines()
            .map(|line| line.split(',').collect::<Vec<_>>())
            .find(|fields| fields.len() > 37 && fields[0] == backend && fields[1] == server)
            .map_or_else(
                || ("<not listed>".to_owned(), String::new()),
                |fields| {
                    (
                        fields[17].to_owned(),
                        format!("{} {}", fields[36], fields[37]),
                    )
                },
            )
    }

    /// Waits until HAProxy sends `backend`'s traffic to `server` again (it is fully `UP`), for
    /// up to `within`.
    pub async fn wait_up(&self, backend: &str, server: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let (state, check) = self.status(backend, server).await;
            if state == "UP" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "HAProxy does not send {backend}'s traffic to {server} {within:?} after it \
                 started: it is {state}, its last health check {check}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The lines of HAProxy's request log with a status of 500 or more: the answers it made
    /// itself or passed on from a server, with its timers and termination state (why).
    pub fn errors(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.path().join("haproxy.log")).unwrap_or_default();
        log.lines()
            .filter(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                words.windows(2).any(|pair| {
                    pair[0].matches('/').count() == 4
                        && pair[1].parse::<u16>().is_ok_and(|status| status >= 500)
                })
            })
            .map(str::to_owned)
            .collect()
    }

    /// Fails the test if HAProxy has exited.
    pub fn assert_running(&mut self) {
        if let Some(exit) = self.process.try_wait().unwrap() {
            panic!("HAProxy exited ({exit})");
        }
    }
}
