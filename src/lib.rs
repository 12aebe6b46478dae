//! seckill: a flash-sale (秒杀) system that sells exactly the stock, answers every request in
//! milliseconds, and runs with zero set-up (embedded mode) or as a cluster.
//!
//! Read `domain` for what things are, `sale` for the rules, `gate` and `pipeline` for how the
//! hot path stays fast and safe, `http` for the API and pages, `server` for the connections
//! they are served over, `app` for the wiring.

pub mod app;
pub mod auth;
pub mod cli;
pub mod clock;
pub mod config;
pub mod demo;
pub mod domain;
pub mod error;
pub mod gate;
pub mod http;
pub mod ids;
pub mod lease;
pub mod limits;
pub mod payment;
pub mod pipeline;
pub mod redact;
pub mod redis_link;
pub mod sale;
pub mod server;
pub mod store;
