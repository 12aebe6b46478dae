//! RabbitMQ killed and started again in the middle of a sale: two `seckill serve` processes and
//! a `seckill worker` relay through a RabbitMQ node of this test's own (its own node name,
//! ports and data directory), killed with SIGKILL and started again on the same data; the
//! shared broker is never touched. The sale goes on while the broker is down (accepted orders
//! wait in the Redis outbox), and once it is back every accepted order is stored exactly once,
//! with its payment deadline waiting in the delay queue, and no process needed a restart.
//!
//! It runs where `SECKILL_TEST_AMQP=1` (`mysql redis amqp`, `postgres cluster amqp`).

use crate::support::TestDatabase;
use crate::support::crowd::{Crowd, accepted_ids, assert_stored_exactly, crowd_client};
use crate::support::processes::Cluster;
use crate::support::processes::Sale;
use crate::support::tls_servers::{kill_rabbitmq_node, rabbitmq_node};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::Child;
use tokio::time::Instant;

/// A RabbitMQ node of a test's own, with persistent data in a temporary directory.
struct PrivateRabbit {
    dir: tempfile::TempDir,
    node: String,
    port: u16,
    dist_port: u16,
    server: Child,
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("finding a free port")
        .port()
}

impl PrivateRabbit {
    /// Starts a node and waits until it takes connections; fails the test when RabbitMQ is not
    /// installed.
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("rabbitmq.conf"),
            "disk_free_limit.absolute = 1MB\n",
        )
        .unwrap();
        let node = format!(
            "seckill-test-{}-{}@localhost",
            std::process::id(),
            free_port()
        );
        let (port, dist_port) = (free_port(), free_port());
        let server = Self::spawn(dir.path(), &node, port, dist_port).await;
        Self {
            dir,
            node,
            port,
            dist_port,
            server,
        }
    }

    fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Starts the node (in a process group of its own, with everything it forks) and waits
    /// until a client can connect.
    async fn spawn(dir: &Path, node: &str, port: u16, dist_port: u16) -> Child {
        let server = rabbitmq_node(&[], dir, node, dist_port)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", port.to_string())
            .spawn()
            .expect("starting rabbitmq-server");
        let url = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let properties = lapin::ConnectionProperties::default();
            if let Ok(connection) = lapin::Connection::connect(&url, properties).await {
                let _ = connection.close(200, "ready".into()).await;
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "the private RabbitMQ node did not take connections within 60 s (logs in {})",
                dir.join("log").display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Kills the node and everything it forked with SIGKILL: nothing is flushed or closed.
    async fn kill(&mut self) {
        kill_rabbitmq_node(&self.server);
        let _ = self.server.wait().await;
    }

    /// Kills the node and starts it again on its data, on the same ports.
    async fn kill_and_restart(&mut self) {
        self.kill().await;
        self.server = Self::spawn(self.dir.path(), &self.node, self.port, self.dist_port).await;
    }
}

impl Drop for PrivateRabbit {
    fn drop(&mut self) {
        kill_rabbitmq_node(&self.server);
    }
}

mod needs_amqp {
    use super::*;
    use crate::support::{Need, require};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs RabbitMQ: run by scripts/test on mysql redis amqp and postgres cluster amqp"]
    async fn rabbitmq_killed_and_restarted_mid_sale_loses_and_duplicates_no_order() {
        require(Need::Amqp);
        let mut rabbit = PrivateRabbit::start().await;
        let cluster = Cluster::new(Arc::new(TestDatabase::fresh().await)).with_amqp(rabbit.url());
        let names = cluster.amqp().unwrap().1.clone();
        let stock = 1_500;
        let mut sale = Sale::start(&cluster, stock, 3_000, &[]).await;
        let client = crowd_client();

        let tokens = std::mem::take(&mut sale.tokens);
        let crowd = Crowd::start(&client, &sale.urls(), tokens, sale.product, 32, false);
        crowd.wait_accepted(100).await;
        let before = crowd.accepted();
        let killed = Instant::now();
        rabbit.kill_and_restart().await;
        let accepted_while_down = crowd.accepted() - before;
        eprintln!(
            "RabbitMQ down and restarting for {:?}; {accepted_while_down} buys accepted meanwhile",
            killed.elapsed()
        );
        let answers = crowd.answers().await;
        let accepted = accepted_ids(&answers);
        assert!(
            accepted_while_down > 0,
            "no buy was accepted while RabbitMQ was down: the sale stopped with it"
        );
        assert_stored_exactly(&sale.observer, sale.product, stock, &accepted).await;

        // Each stored order's payment deadline waits in the delay queue (some twice: an order
        // stored again after a redelivery starts its clock again; the cancel happens once). A
        // worker publishes a batch's deadlines just after storing it, so the last batch's may
        // still be on their way.
        let connection =
            lapin::Connection::connect(&rabbit.url(), lapin::ConnectionProperties::default())
                .await
                .unwrap();
        let channel = connection.create_channel().await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let waiting = channel
                .queue_declare(
                    format!("{names}deadline.wait.900000ms").into(),
                    lapin::options::QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    },
                    lapin::types::FieldTable::default(),
                )
                .await
                .unwrap()
                .message_count() as usize;
            if waiting >= accepted.len() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{waiting} payment deadlines waiting for {} stored orders",
                accepted.len()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        sale.assert_alive();
    }
}
