//! Servers of a test's own that speak TLS only, with certificates the test makes (the `openssl`
//! command): a CA, a server certificate it signs and a client certificate, then a Redis with a
//! TLS port only (one node, or a cluster whose nodes talk TLS among themselves), a PostgreSQL
//! that accepts `hostssl` connections only, a MariaDB with `require_secure_transport`, and a
//! RabbitMQ node with a TLS listener only.
//!
//! Each launcher takes the address to bind and a command prefix to run the server under (empty,
//! or e.g. `["ip", "netns", "exec", "host1"]` for a network namespace); the server is found
//! ready through the same prefix, so it works wherever the prefix puts it.

use super::backends::RABBITMQ_SERVER;
use super::private_redis::{free_port, redis_server};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tempfile::TempDir;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// Runs `openssl` with `args` in `dir`, failing the test with its output if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let output = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running openssl (the test makes its certificates with it)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA, a server certificate it signs and a client certificate it signs, as PEM files in a
/// directory of their own.
pub struct Certificates {
    /// Holds the files; removed with them.
    dir: TempDir,
}

impl Certificates {
    /// A new CA with a server certificate for `127.0.0.1`, `localhost` and `extra_ip` (the
    /// address a server has in a namespace), usable as a client certificate too (a cluster's
    /// nodes show it to each other), and a client certificate for the processes.
    pub fn make(extra_ip: Option<IpAddr>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path();
        let key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=seckill test CA"];
        ca.extend(key);
        ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
        ca.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
        ca.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
        openssl(path, &ca);
        let mut names = "IP:127.0.0.1,DNS:localhost".to_owned();
        if let Some(ip) = extra_ip {
            names.push_str(&format!(",IP:{ip}"));
        }
        for (name, usage, subject) in [
            ("server", "serverAuth,clientAuth", "/CN=localhost"),
            ("client", "clientAuth", "/CN=seckill"),
        ] {
            let extensions = format!(
                "basicConstraints=CA:FALSE\nextendedKeyUsage={usage}\nsubjectAltName={names}\n"
            );
            std::fs::write(path.join(format!("{name}.ext")), extensions).unwrap();
            let (key_file, csr) = (format!("{name}.key"), format!("{name}.csr"));
            let mut request = vec!["req", "-subj", subject, "-keyout", &key_file, "-out", &csr];
            request.extend(key);
            openssl(path, &request);
            let (pem, ext) = (format!("{name}.pem"), format!("{name}.ext"));
            openssl(
                path,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-out",
                    &pem,
                    "-extfile",
                    &ext,
                ],
            );
        }
        Self { dir }
    }

    /// One of the files: `ca.pem`, `server.pem`, `server.key`, `client.pem`, `client.key`.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The CA certificate, to trust.
    pub fn ca(&self) -> PathBuf {
        self.file("ca.pem")
    }
}

/// `program` run under `prefix` (when not empty).
fn command(prefix: &[&str], program: &str) -> Command {
    match prefix.split_first() {
        None => Command::new(program),
        Some((first, rest)) => {
            let mut command = Command::new(first);
            command.args(rest).arg(program);
            command
        }
    }
}

/// Runs `program` with `args` under `prefix` until it succeeds (or `what` fails the test after
/// 30 s); returns its output.
async fn until_it_succeeds(prefix: &[&str], program: &str, args: &[String], what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let output = command(prefix, program).args(args).output().await.unwrap();
        if output.status.success() {
            return String::from_utf8_lossy(&output.stdout).into_owned();
        }
        assert!(
            Instant::now() < deadline,
            "{what} within 30 s: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Redis nodes of a test's own that listen on a TLS port only (`--port 0`), each with a data
/// directory of its own.
pub struct TlsRedis {
    /// The address the nodes listen on.
    bind: IpAddr,
    /// Their TLS ports, one a node.
    pub ports: Vec<u16>,
    /// Their data directories.
    _dirs: Vec<TempDir>,
    /// The running nodes, killed when dropped.
    _nodes: Vec<Child>,
}

impl TlsRedis {
    /// One node with `certs`' server certificate; with `client_certificates`, it refuses
    /// clients that show none signed by the CA.
    pub async fn single(
        certs: &Certificates,
        prefix: &[&str],
        bind: IpAddr,
        client_certificates: bool,
    ) -> Self {
        let auth = if client_certificates { "yes" } else { "no" };
        let redis = Self::spawn(certs, prefix, bind, 1, &["--tls-auth-clients", auth]);
        redis.ping(certs, prefix).await;
        redis
    }

    /// A Redis Cluster of `masters` masters (at least three) that talk TLS to clients and to
    /// each other (`--tls-cluster yes`), client certificates not asked for.
    pub async fn cluster(
        certs: &Certificates,
        prefix: &[&str],
        bind: IpAddr,
        masters: usize,
    ) -> Self {
        let cluster = [
            ["--tls-auth-clients", "no"],
            ["--cluster-enabled", "yes"],
            ["--tls-cluster", "yes"],
            ["--cluster-node-timeout", "2000"],
        ]
        .concat();
        let redis = Self::spawn(certs, prefix, bind, masters, &cluster);
        redis.ping(certs, prefix).await;
        let mut create = redis.cli_args(certs, redis.ports[0]);
        create.push("--cluster".into());
        create.push("create".into());
        create.extend(redis.ports.iter().map(|port| format!("{bind}:{port}")));
        create.push("--cluster-yes".into());
        until_it_succeeds(prefix, "redis-cli", &create, "the cluster was not created").await;
        for port in &redis.ports {
            let mut info = redis.cli_args(certs, *port);
            info.extend(["cluster".into(), "info".into()]);
            let deadline = Instant::now() + Duration::from_secs(30);
            while !until_it_succeeds(prefix, "redis-cli", &info, "CLUSTER INFO failed")
                .await
                .contains("cluster_state:ok")
            {
                assert!(
                    Instant::now() < deadline,
                    "the cluster is not ok after 30 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        redis
    }

    /// Starts `count` nodes with `extra` options.
    fn spawn(
        certs: &Certificates,
        prefix: &[&str],
        bind: IpAddr,
        count: usize,
        extra: &[&str],
    ) -> Self {
        let binary = redis_server();
        let (mut ports, mut dirs, mut nodes) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..count {
            let port = free_port();
            let dir = tempfile::tempdir().unwrap();
            let file = |name: &str| certs.file(name).to_str().unwrap().to_owned();
            let node = command(prefix, &binary)
                .args([
                    "--port",
                    "0",
                    "--tls-port",
                    &port.to_string(),
                    "--protected-mode",
                    "no",
                ])
                .args([
                    "--bind",
                    &bind.to_string(),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .args(["--daemonize", "no", "--dir", dir.path().to_str().unwrap()])
                .args(["--tls-cert-file", &file("server.pem")])
                .args(["--tls-key-file", &file("server.key")])
                .args(["--tls-ca-cert-file", &file("ca.pem")])
                .args(extra)
                .stdout(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .unwrap_or_else(|e| panic!("starting {binary}: {e}"));
            ports.push(port);
            dirs.push(dir);
            nodes.push(node);
        }
        Self {
            bind,
            ports,
            _dirs: dirs,
            _nodes: nodes,
        }
    }

    /// `redis-cli`'s options to reach the node on `port` over TLS, as the client.
    fn cli_args(&self, certs: &Certificates, port: u16) -> Vec<String> {
        let file = |name: &str| certs.file(name).to_str().unwrap().to_owned();
        [
            "--tls",
            "--cacert",
            &file("ca.pem"),
            "--cert",
            &file("client.pem"),
            "--key",
            &file("client.key"),
            "-h",
            &self.bind.to_string(),
            "-p",
            &port.to_string(),
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// Waits until every node answers PING over TLS.
    async fn ping(&self, certs: &Certificates, prefix: &[&str]) {
        for port in &self.ports {
            let mut ping = self.cli_args(certs, *port);
            ping.push("ping".into());
            let answer =
                until_it_succeeds(prefix, "redis-cli", &ping, "redis-server did not answer").await;
            assert!(answer.contains("PONG"), "{answer}");
        }
    }

    /// `rediss://` URL of node `i`.
    pub fn url(&self, i: usize) -> String {
        format!("rediss://{}:{}", self.bind, self.ports[i])
    }
}

/// The newest PostgreSQL server programs Debian installed.
fn postgres_bin() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("this test needs PostgreSQL's server programs in /usr/lib/postgresql")
        .map(|entry| entry.unwrap().path().join("bin"))
        .filter(|bin| bin.join("postgres").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("no /usr/lib/postgresql/*/bin/postgres")
}

/// Whether the tests run as root, which database servers refuse unless told otherwise.
fn as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Who runs PostgreSQL: itself, or (PostgreSQL refuses root) the `postgres` account, as a
/// `setpriv` prefix and its user and group ids.
fn postgres_account() -> Option<(Vec<String>, u32, u32)> {
    if !as_root() {
        return None;
    }
    let id = |flag: &str| {
        let output = std::process::Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("running id");
        assert!(
            output.status.success(),
            "PostgreSQL will not run as root and there is no postgres account"
        );
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse::<u32>()
            .unwrap()
    };
    let prefix = [
        "setpriv",
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        "--",
    ];
    Some((prefix.map(str::to_owned).to_vec(), id("-u"), id("-g")))
}

/// A PostgreSQL of a test's own: `ssl = on` and `hostssl` lines only in `pg_hba.conf` (no
/// plain TCP, no Unix socket), every user trusted, on a free port.
pub struct TlsPostgres {
    /// The address it listens on.
    bind: IpAddr,
    /// Its port.
    pub port: u16,
    /// Its data directory, removed with it.
    dir: TempDir,
    /// The running server (or the prefix that runs it).
    _server: Child,
}

impl TlsPostgres {
    /// Makes a cluster in a new directory and starts it with `certs`' server certificate.
    pub async fn start(certs: &Certificates, prefix: &[&str], bind: IpAddr) -> Self {
        let bin = postgres_bin();
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let account = postgres_account();
        let mut full_prefix: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
        if let Some((setpriv, uid, gid)) = &account {
            std::os::unix::fs::chown(dir.path(), Some(*uid), Some(*gid)).unwrap();
            full_prefix.extend(setpriv.iter().cloned());
        }
        let full_prefix: Vec<&str> = full_prefix.iter().map(String::as_str).collect();
        let initdb = command(&full_prefix, bin.join("initdb").to_str().unwrap())
            .args([
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-N",
            ])
            .output()
            .await
            .unwrap();
        assert!(
            initdb.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        for (from, to) in [("server.pem", "server.crt"), ("server.key", "server.key")] {
            let to = data.join(to);
            std::fs::copy(certs.file(from), &to).unwrap();
            std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
            if let Some((_, uid, gid)) = &account {
                std::os::unix::fs::chown(&to, Some(*uid), Some(*gid)).unwrap();
            }
        }
        std::fs::write(
            data.join("pg_hba.conf"),
            "hostssl all all 0.0.0.0/0 trust\nhostssl all all ::/0 trust\n",
        )
        .unwrap();
        let port = free_port();
        let server = command(&full_prefix, bin.join("postgres").to_str().unwrap())
            .args(["-D", data.to_str().unwrap(), "-p", &port.to_string()])
            .args(["-c", &format!("listen_addresses={bind}")])
            .args(["-c", "unix_socket_directories="])
            .args(["-c", "ssl=on", "-c", "fsync=off"])
            .args([
                "-c",
                "ssl_cert_file=server.crt",
                "-c",
                "ssl_key_file=server.key",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("starting postgres");
        let ready = [
            "-h".to_owned(),
            bind.to_string(),
            "-p".to_owned(),
            port.to_string(),
        ];
        until_it_succeeds(prefix, "pg_isready", &ready, "PostgreSQL did not start").await;
        Self {
            bind,
            port,
            dir,
            _server: server,
        }
    }

    /// The URL of database `name` with `options` (sqlx's TLS parameters).
    pub fn url(&self, name: &str, options: &str) -> String {
        format!(
            "postgres://postgres@{}:{}/{name}?{options}",
            self.bind, self.port
        )
    }
}

/// Stops the server at once: under a prefix the child may not be PostgreSQL itself, so the
/// postmaster named in its pid file is told to quit.
impl Drop for TlsPostgres {
    fn drop(&mut self) {
        let pid_file = self.dir.path().join("data/postmaster.pid");
        if let Some(pid) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<i32>().ok())
        {
            // SAFETY: kill has no memory preconditions; the pid is the postmaster's.
            unsafe { libc::kill(pid, libc::SIGQUIT) };
        }
    }
}

/// A MariaDB of a test's own that refuses connections without TLS
/// (`require_secure_transport`), with a user `seckill` (password `seckill`) allowed from
/// anywhere, on a free port.
pub struct TlsMariadb {
    /// The address it listens on.
    bind: IpAddr,
    /// Its port.
    pub port: u16,
    /// Its data directory and socket, removed with it.
    _dir: TempDir,
    /// The running server, killed when dropped.
    _server: Child,
}

impl TlsMariadb {
    /// Makes a data directory and starts the server on it with `certs`' server certificate.
    pub async fn start(certs: &Certificates, prefix: &[&str], bind: IpAddr) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        let user: &[&str] = if as_root() { &["--user=root"] } else { &[] };
        let install = command(prefix, "mariadb-install-db")
            .args(["--no-defaults", &format!("--datadir={}", path("data"))])
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .args(user)
            .output()
            .await
            .expect("this test needs MariaDB's server (mariadb-install-db)");
        assert!(
            install.status.success(),
            "mariadb-install-db: {}",
            String::from_utf8_lossy(&install.stderr)
        );
        let port = free_port();
        let file = |name: &str| certs.file(name).display().to_string();
        let server = command(prefix, "mariadbd")
            .args(["--no-defaults", &format!("--datadir={}", path("data"))])
            .args(user)
            .args([format!("--port={port}"), format!("--bind-address={bind}")])
            .args([
                format!("--socket={}", path("socket")),
                format!("--pid-file={}", path("pid")),
            ])
            .args([
                format!("--ssl-ca={}", file("ca.pem")),
                format!("--ssl-cert={}", file("server.pem")),
            ])
            .args([format!("--ssl-key={}", file("server.key"))])
            .args([
                "--require-secure-transport=ON",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=16M",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("starting mariadbd");
        let grant = [
            format!("--socket={}", path("socket")),
            "-uroot".to_owned(),
            "-e".to_owned(),
            "CREATE USER IF NOT EXISTS 'seckill'@'%' IDENTIFIED BY 'seckill'; \
             GRANT ALL ON *.* TO 'seckill'@'%'"
                .to_owned(),
        ];
        until_it_succeeds(prefix, "mariadb", &grant, "MariaDB did not start").await;
        Self {
            bind,
            port,
            _dir: dir,
            _server: server,
        }
    }

    /// The URL of database `name` with `options` (sqlx's TLS parameters).
    pub fn url(&self, name: &str, options: &str) -> String {
        format!(
            "mysql://seckill:seckill@{}:{}/{name}?{options}",
            self.bind, self.port
        )
    }
}

/// A RabbitMQ node of a test's own, run under `prefix`: named `node`, its data, logs,
/// plugins and configuration (`rabbitmq.conf`, which says its listeners) in `dir`, in a
/// process group of its own (kill the group to kill everything it forks); fails the test when
/// RabbitMQ is not installed.
pub fn rabbitmq_node(prefix: &[&str], dir: &Path, node: &str, dist_port: u16) -> Command {
    assert!(
        Path::new(RABBITMQ_SERVER).exists(),
        "this test needs RabbitMQ's server installed ({RABBITMQ_SERVER}; scripts/services \
         rabbitmq installs it)"
    );
    let path = |name: &str| dir.join(name);
    if !path("enabled_plugins").exists() {
        std::fs::write(path("enabled_plugins"), "").unwrap();
    }
    let mut command = command(prefix, RABBITMQ_SERVER);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("RABBITMQ_NODENAME", node)
        .env("RABBITMQ_DIST_PORT", dist_port.to_string())
        .env("RABBITMQ_MNESIA_BASE", path("mnesia"))
        .env("RABBITMQ_LOG_BASE", path("log"))
        .env("RABBITMQ_PID_FILE", path("rabbitmq.pid"))
        .env("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins"))
        .env("RABBITMQ_CONFIG_FILE", path("rabbitmq.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    command
}

/// Kills a RabbitMQ node started by [`rabbitmq_node`] and everything it forked, with SIGKILL.
pub fn kill_rabbitmq_node(server: &Child) {
    if let Some(group) = server.id() {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .status();
    }
}

/// A RabbitMQ node of a test's own with a TLS listener only (`listeners.tcp = none`), its own
/// node name, ports and data directory; `guest` may connect from anywhere.
pub struct TlsRabbit {
    /// The address it listens on.
    bind: IpAddr,
    /// Its TLS port.
    pub port: u16,
    /// Its data, logs and configuration, removed with it.
    dir: TempDir,
    /// The running node (in a process group of its own, with everything it forks).
    server: Child,
}

impl TlsRabbit {
    /// Starts a node with `certs`' server certificate and waits until a client trusting the
    /// test's CA connects.
    pub async fn start(certs: &Certificates, prefix: &[&str], bind: IpAddr) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (port, dist_port) = (free_port(), free_port());
        let file = |name: &str| certs.file(name).display().to_string();
        std::fs::write(
            dir.path().join("rabbitmq.conf"),
            format!(
                "disk_free_limit.absolute = 1MB\nloopback_users = none\nlisteners.tcp = none\n\
                 listeners.ssl.default = {bind}:{port}\nssl_options.cacertfile = {}\n\
                 ssl_options.certfile = {}\nssl_options.keyfile = {}\n\
                 ssl_options.verify = verify_none\nssl_options.fail_if_no_peer_cert = false\n",
                file("ca.pem"),
                file("server.pem"),
                file("server.key"),
            ),
        )
        .unwrap();
        let node = format!("seckill-tls-{}-{port}@localhost", std::process::id());
        let server = rabbitmq_node(prefix, dir.path(), &node, dist_port)
            .spawn()
            .expect("starting rabbitmq-server");
        let rabbit = Self {
            bind,
            port,
            dir,
            server,
        };
        let ca = std::fs::read_to_string(certs.ca()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let tls = lapin::tcp::OwnedTLSConfig {
                identity: None,
                cert_chain: Some(ca.clone()),
            };
            let connection = lapin::DefaultConnectionBuilder::new()
                .unwrap()
                .with_uri_str(rabbit.url())
                .with_tls_config(tls)
                .connect()
                .await;
            if let Ok(connection) = connection {
                let _ = connection.close(200, "ready".into()).await;
                return rabbit;
            }
            assert!(
                Instant::now() < deadline,
                "the private RabbitMQ node did not take TLS connections within 60 s (logs in {})",
                rabbit.dir.path().join("log").display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Its `amqps://` URL, as `guest`, on the default virtual host.
    pub fn url(&self) -> String {
        format!("amqps://guest:guest@{}:{}/%2f", self.bind, self.port)
    }
}

/// Kills the node and everything it forked.
impl Drop for TlsRabbit {
    fn drop(&mut self) {
        kill_rabbitmq_node(&self.server);
    }
}
