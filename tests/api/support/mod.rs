//! What the tests share, by role; the test files beside this folder hold tests only.
//!
//! - `backends.rs`: the run's backend combination, the one place that reads `SECKILL_TEST_*`,
//!   each test's fresh database, Redis prefix and RabbitMQ names, and what an ignored test needs.
//! - `app.rs`: `TestApp`, the real server on port 0 over them, and reads of what it stored.
//! - `bare.rs`: the connection server alone, over a few routes of its own.
//! - `buy.rs`: the one buy request.
//! - `http.rs`: the client and reading answers.
//! - `shoppers.rs`, `operator.rs`: the two kinds of user, signed in.
//! - `sandbox.rs`: paying through the built-in gateway.
//! - `orders.rs`: orders written straight to the store.
//! - `shared_redis.rs`: servers sharing one Redis prefix and database.
//! - `processes.rs`, `crowd.rs`, `faulty_sale.rs`, `private_redis.rs`, `proxies.rs`,
//!   `link_cut.rs`: server and worker processes of the real binary, crowds buying from them,
//!   and the faults a test makes (its own Redis or RabbitMQ killed, a link cut by a proxy or
//!   by `iptables`).
//! - `hosts.rs`, `haproxy.rs`, `rolling.rs`: the deployment across hosts
//!   (network namespaces), its load balancer, and a rolling restart as the
//!   shoppers behind the load balancer see it.
//! - `probes.rs`: `/readyz` read as a load balancer does, and SIGTERM sent as a service
//!   manager does.
//! - `tls_servers.rs`: certificates a test makes, and Redis, PostgreSQL and RabbitMQ servers
//!   that speak TLS only.
//! - `hosts.rs`, `host_backends.rs`, `haproxy.rs`, `rolling.rs`: the deployment across hosts
//!   (network namespaces), its backends and load balancer, and a rolling restart as the
//!   shoppers behind the load balancer see it.

pub mod app;
pub mod backends;
pub mod bare;
pub mod buy;
pub mod crowd;
pub mod faulty_sale;
pub mod haproxy;
pub mod hosts;
pub mod http;
pub mod link_cut;
pub mod operator;
pub mod orders;
pub mod private_redis;
pub mod probes;
pub mod processes;
pub mod proxies;
pub mod rolling;
pub mod sandbox;
pub mod sentinel;
pub mod shared_redis;
pub mod shoppers;
pub mod tls_servers;

pub use app::{ADMIN_TOKEN, SECRET, TestApp, at_the_next_second, test_config};
pub use backends::{Need, TestDatabase, fresh_prefix, local_amqp, redis_url, require};
pub use bare::bare_server;
pub use buy::once_the_gate_reopens;
pub use http::{TextOfAnswer, assert_form_refused, client_builder, code, rfc3339, status_and_json};
pub use shared_redis::{delete_keys, server_on_with};
pub use shoppers::{orders_status, register, sign_in, try_sign_in, within_spread};
