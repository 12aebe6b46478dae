//! One integration test binary: every test starts the real server on port 0 with its own
//! database (SQLite, PostgreSQL or MySQL: see `support/backends.rs`) and talks to it over HTTP.
//! What the tests share is in `support/`; each other file holds tests.

mod admin;
mod admin_console;
mod backpressure;
mod bad_input;
mod bench;
mod buying;
mod callback_floods;
mod config_file;
mod connections;
mod deadlines;
mod demo_pay_urls;
mod disabled_users;
mod faults;
mod forged_requests;
mod guards;
mod idempotency;
mod images;
mod metrics;
mod migrate;
mod openapi;
mod operator_doors;
mod operator_text;
mod pages;
mod payment_faults;
mod payments;
mod pipeline;
mod processes;
mod rabbitmq_restart;
mod rate_limits;
mod redis_failover;
mod redis_restart;
mod refunds;
mod request_heads;
mod restart;
mod rolling_restart;
mod sale_controls;
mod sessions;
mod shared_gate;
mod sign_in_fairness;
mod sign_out;
mod store;
mod stream_sessions;
mod support;
