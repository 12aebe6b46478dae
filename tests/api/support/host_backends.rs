//! The backends of a deployment test, started by the test on the backends host and bound to
//! its address only: a PostgreSQL server, a Redis and a RabbitMQ node of their own, in
//! temporary directories, on free ports. Plain-text links.

use super::backends::{RABBITMQ_SERVER, on_path};
use super::hosts::Host;
use super::private_redis::free_port;
use std::process::Stdio;
use std::time::Duration;
use tempfile::TempDir;
use tokio::process::Child;
use tokio::time::Instant;

/// A PostgreSQL server of the test's own on a host; stopped (fast shutdown) when dropped.
pub struct HostPostgres {
    /// The server's URL without a database name, as `TestDatabase::created_on` takes it.
    pub url: String,
    /// The postmaster.
    server: Child,
    /// Its data directory and socket, removed with it.
    _dir: TempDir,
}

impl HostPostgres {
    /// `initdb` (trust authentication, the network allowed) and `postgres` on `host`'s address
    /// and a free port; waits until it takes connections. As root, both run as the `postgres`
    /// user, since PostgreSQL refuses to run as root.
    pub async fn start(host: &Host) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let as_root = unsafe { libc::geteuid() } == 0;
        if as_root {
            let owned = std::process::Command::new("chown")
                .args(["postgres:", dir.path().to_str().unwrap()])
                .status()
                .unwrap();
            assert!(owned.success(), "chown postgres: of the data directory");
        }
        let initdb = as_postgres(as_root, "initdb");
        let initdb = std::process::Command::new(&initdb[0])
            .args(&initdb[1..])
            .args([
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "--auth=trust",
            ])
            .args(["--no-sync", "-E", "UTF8", "--no-instructions"])
            .stdout(Stdio::null())
            .output()
            .expect("running initdb");
        assert!(
            initdb.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let hba = data.join("pg_hba.conf");
        let mut rules = std::fs::read_to_string(&hba).unwrap();
        rules.push_str("host all all 0.0.0.0/0 trust\n");
        std::fs::write(&hba, rules).unwrap();

        let port = free_port();
        let postgres = as_postgres(as_root, "postgres");
        let mut command = host.command(&postgres[0]);
        command
            .args(&postgres[1..])
            .args(["-D", data.to_str().unwrap(), "-p", &port.to_string()])
            .args([
                "-h",
                &host.ip.to_string(),
                "-k",
                dir.path().to_str().unwrap(),
            ])
            .args(["-c", "fsync=off", "-c", "max_connections=200"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let server = command.spawn().expect("starting postgres");
        let url = format!("postgres://postgres@{}:{port}", host.ip);
        sqlx::any::install_default_drivers();
        let admin = format!("{url}/postgres");
        wait_until("PostgreSQL", || {
            let admin = admin.clone();
            async move { sqlx::AnyPool::connect(&admin).await.is_ok() }
        })
        .await;
        Self {
            url,
            server,
            _dir: dir,
        }
    }
}

impl Drop for HostPostgres {
    fn drop(&mut self) {
        // A fast shutdown (not SIGKILL, which would leave its shared memory behind).
        if let Some(pid) = self.server.id() {
            unsafe { libc::kill(pid as i32, libc::SIGINT) };
        }
    }
}

/// The words that run the PostgreSQL program `name`: as the `postgres` user when `as_root`
/// (PostgreSQL refuses to run as root), through `setpriv`, which replaces itself with the
/// program, so the child is the server itself.
fn as_postgres(as_root: bool, name: &str) -> Vec<String> {
    let user = [
        "setpriv",
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        "--",
    ];
    let user = if as_root { &user[..] } else { &[] };
    user.iter()
        .map(|word| word.to_string())
        .chain([pg_binary(name)])
        .collect()
}

/// The path of a PostgreSQL program: on the `PATH`, or in Debian's versioned directory.
fn pg_binary(name: &str) -> String {
    let debian = || {
        let mut versions: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path().join("bin").join(name))
            .filter(|path| path.exists())
            .collect();
        versions.sort();
        versions.pop()
    };
    on_path(name)
        .or_else(debian)
        .unwrap_or_else(|| {
            panic!("{name} is not installed (scripts/services postgres installs it)")
        })
        .display()
        .to_string()
}

/// A Redis of the test's own on a host (no persistence); killed when dropped.
pub struct HostRedis {
    /// Its URL.
    pub url: String,
    /// The server.
    _server: Child,
    /// Its working directory.
    _dir: TempDir,
}

impl HostRedis {
    /// `redis-server` on `host`'s address and a free port; waits until it answers.
    pub async fn start(host: &Host) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let server = host
            .command("redis-server")
            .args(["--bind", &host.ip.to_string(), "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            // Its only client is the private network, and it has no password.
            .args(["--protected-mode", "no"])
            .args(["--dir", dir.path().to_str().unwrap()])
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("starting redis-server");
        let url = format!("redis://{}:{port}", host.ip);
        wait_until("Redis", || {
            let url = url.clone();
            async move { seckill::redis_link::connect(&url).await.is_ok() }
        })
        .await;
        Self {
            url,
            _server: server,
            _dir: dir,
        }
    }
}

/// A RabbitMQ node of the test's own on a host, with a user of its own (RabbitMQ lets `guest`
/// in from its own machine only); killed with everything it started when dropped.
pub struct HostRabbitmq {
    /// Its URL, with the user.
    pub url: String,
    /// The node's address, to wait for its listener.
    listener: std::net::SocketAddr,
    /// The node's start script, leader of a process group of its own (the Erlang VM and its
    /// helpers are in it).
    node: Child,
    /// Its configuration, database and logs.
    _dir: TempDir,
}

impl HostRabbitmq {
    /// Starts the node on `host`'s address and a free port; [`HostRabbitmq::wait_ready`] waits
    /// until it takes connections (it takes seconds: start it first, wait for it last).
    pub fn start(host: &Host) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        let listener = std::net::SocketAddr::from((host.ip, free_port()));
        let config = format!(
            "listeners.tcp.default = {listener}\nloopback_users = none\n\
             default_user = seckill\ndefault_pass = seckill\n"
        );
        std::fs::write(path("rabbitmq.conf"), config).unwrap();
        std::fs::write(path("enabled_plugins"), "[].\n").unwrap();
        let node = host
            .command(RABBITMQ_SERVER)
            .env("HOME", dir.path())
            .env(
                "RABBITMQ_NODENAME",
                format!("seckill-test-{}@localhost", free_port()),
            )
            .env("RABBITMQ_DIST_PORT", free_port().to_string())
            .env("RABBITMQ_CONFIG_FILE", path("rabbitmq"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins"))
            .env("RABBITMQ_MNESIA_BASE", path("mnesia"))
            .env("RABBITMQ_LOG_BASE", path("log"))
            .env("RABBITMQ_PID_FILE", path("pid"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("starting rabbitmq-server (scripts/services rabbitmq installs it)");
        Self {
            url: format!("amqp://seckill:seckill@{listener}/%2f"),
            listener,
            node,
            _dir: dir,
        }
    }

    /// Waits until the node listens (it opens its listener last, once it has booted).
    pub async fn wait_ready(&self) {
        let listener = self.listener;
        wait_until("RabbitMQ", move || async move {
            tokio::net::TcpStream::connect(listener).await.is_ok()
        })
        .await;
    }
}

impl Drop for HostRabbitmq {
    fn drop(&mut self) {
        if let Some(pid) = self.node.id() {
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        }
    }
}

/// Waits until `ready` holds, for up to 60 s; fails the test naming `what` after that.
async fn wait_until<F, Fut>(what: &str, mut ready: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready().await {
        assert!(
            Instant::now() < deadline,
            "the test's own {what} did not answer within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
