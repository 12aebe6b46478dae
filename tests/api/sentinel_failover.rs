//! A Redis behind Sentinel losing its master: a group of the test's own (a master, one replica,
//! three sentinels: see `support/sentinel.rs`), the master killed with SIGKILL, the sentinels
//! promoting the replica, and the links of `redis+sentinel://` following the promotion without
//! a restart. First the link alone, then a sale of two servers and a worker under a crowd, with
//! every buy's order acknowledged by the replica before its `202`
//! (`SECKILL_REDIS_WAIT_REPLICAS=1`): nothing answered `202` lost, exactly the stock sold.
//!
//! The killed master is started again as the new master's replica, as an operator would,
//! once its replica took over: the acknowledgement needs a replica.
//!
//! They run once per `scripts/test`: in the run over PostgreSQL with the gate on the single
//! Redis and no RabbitMQ (`postgres redis`).

use crate::support::faulty_sale::{FaultySale, Outcome, Setup};
use crate::support::sentinel::SentinelGroup;
use std::time::Duration;
use tokio::time::Instant;

mod needs_sentinel_group {
    use super::*;
    use crate::support::{Need, require};
    use reqwest::StatusCode;
    use seckill::redis_link::{RedisLink, connect};

    /// The port of the node `link` writes to, as it says.
    async fn port_of(link: &mut RedisLink) -> redis::RedisResult<u16> {
        let info: String = redis::cmd("INFO").arg("server").query_async(link).await?;
        Ok(info
            .lines()
            .find_map(|line| line.strip_prefix("tcp_port:"))
            .and_then(|port| port.trim().parse().ok())
            .unwrap_or_default())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs PostgreSQL and redis-server: run by scripts/test on postgres redis"]
    async fn the_link_follows_a_promotion_without_a_restart() {
        require(Need::SentinelGroup);
        let mut group = SentinelGroup::start().await;
        let master = group.master().await;
        let url = group.url();
        let sentinels = url
            .trim_start_matches("redis+sentinel://")
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        let refused = |result: anyhow::Result<RedisLink>| match result {
            Ok(_) => panic!("a link to no master was made"),
            Err(e) => format!("{e:#}"),
        };
        let unknown = refused(
            connect(&format!(
                "redis+sentinel://app:secret@{sentinels}/no-such-master"
            ))
            .await,
        );
        assert!(
            unknown.contains("know no master named \"no-such-master\"")
                && unknown.contains(&sentinels)
                && !unknown.contains("secret"),
            "{unknown}"
        );
        let nobody = format!("127.0.0.1:{}", crate::support::private_redis::free_port());
        let silent = refused(connect(&format!("redis+sentinel://:secret@{nobody}/x")).await);
        assert!(
            silent.contains("no sentinel of")
                && silent.contains(&nobody)
                && !silent.contains("secret"),
            "{silent}"
        );

        let mut link = connect(&url).await.unwrap();
        assert!(!link.is_cluster());
        assert_eq!(port_of(&mut link).await.unwrap(), master);
        // A write and the replica's acknowledgement in one pipeline, over the master's one
        // connection (WAIT counts that connection's writes).
        let (_, acknowledged): (String, i64) = redis::pipe()
            .cmd("SET")
            .arg("sentinel-test")
            .arg("before")
            .cmd("WAIT")
            .arg(1)
            .arg(1000)
            .query_async(&mut link)
            .await
            .unwrap();
        assert_eq!(acknowledged, 1, "the replica acknowledged the write");
        let mut clone = link.clone();

        group.kill(master).await;
        let killed = Instant::now();
        let promoted = group.wait_promoted(master).await;
        let promoted_after = killed.elapsed();
        let mut failed = 0;
        let value: String = loop {
            match redis::cmd("GET")
                .arg("sentinel-test")
                .query_async(&mut clone)
                .await
            {
                Ok(value) => break value,
                Err(e) => {
                    failed += 1;
                    assert!(
                        killed.elapsed() < Duration::from_secs(20),
                        "the link still fails 20 s after the master was killed: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        eprintln!(
            "sentinel link: 127.0.0.1:{promoted} promoted {promoted_after:?} after the kill; the \
             link answered again after {:?} ({failed} commands failed in between)",
            killed.elapsed()
        );
        assert_eq!(
            value, "before",
            "the promoted replica has the acknowledged write"
        );
        assert_eq!(port_of(&mut link).await.unwrap(), promoted);
        assert_eq!(port_of(&mut clone).await.unwrap(), promoted);
        let () = redis::cmd("SET")
            .arg("sentinel-test")
            .arg("after")
            .query_async(&mut link)
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    #[ignore = "needs PostgreSQL and redis-server: run by scripts/test on postgres redis"]
    async fn a_sentinel_master_killed_mid_crowd_is_followed_and_nothing_accepted_is_lost() {
        require(Need::SentinelGroup);
        let test = "sentinel master killed";
        let stock = 600;
        let mut group = SentinelGroup::start().await;
        let master = group.master().await;
        let logs = tempfile::tempdir().unwrap();
        let extra = [
            ("SECKILL_REDIS_WAIT_REPLICAS", "1"),
            ("RUST_LOG", "error,seckill::redis_link=info"),
        ];
        let setup = Setup {
            env: &extra,
            logs: Some(logs.path()),
            ..Setup::one_each(stock, 1_500)
        };
        let mut sale = FaultySale::start_with(group.url(), setup).await;
        sale.wait_accepted(100).await;
        group.kill(master).await;
        let killed = Instant::now();
        let promoted = group.wait_promoted(master).await;
        eprintln!(
            "{test}: the sentinels promoted 127.0.0.1:{promoted} {:?} after 127.0.0.1:{master} \
             was killed",
            killed.elapsed()
        );
        group.restart_as_replica(master, promoted).await;
        eprintln!(
            "{test}: 127.0.0.1:{master} back as its replica {:?} after the kill",
            killed.elapsed()
        );
        sale.answered_again(killed, Duration::from_secs(30)).await;
        let answers = sale.answers().await;
        sale.assert_every_process_sells(killed).await;

        // The processes followed on their own: each server is ready again, and each process
        // logged its move to the promoted node.
        let client = reqwest::Client::new();
        for server in sale.servers() {
            let ready = client.get(format!("{server}/readyz")).send().await.unwrap();
            assert_eq!(ready.status(), StatusCode::OK, "{server}/readyz");
        }
        let promoted_at = format!("127.0.0.1:{promoted}");
        for (name, log) in sale.logs() {
            assert!(
                log.lines()
                    .any(|line| line.contains("Redis master moved") && line.contains(&promoted_at)),
                "the {name} did not log its move to {promoted_at}:\n{log}"
            );
        }

        sale.drained().await;
        let stored = sale.stored().await;
        let outcome = Outcome::of(test, &answers, &sale.probed, killed, &stored);
        assert_eq!(
            outcome.lost, 0,
            "orders answered 202 were lost, though the replica acknowledged each"
        );
        assert_eq!(
            stored.len(),
            stock as usize,
            "the sale sold exactly its stock"
        );
        let (balanced, report) = sale.reconcile().await;
        eprintln!("{test}: reconcile balanced: {balanced}\n{report}");
        sale.assert_running();
    }
}
