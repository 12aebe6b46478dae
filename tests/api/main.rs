//! One integration test binary: every test starts the real server on port 0 with its own
//! database (SQLite, PostgreSQL or MySQL: see `backend.rs`) and talks to it over HTTP.

mod admin;
mod admin_console;
mod backend;
mod bad_input;
mod bench;
mod buying;
mod connections;
mod deadlines;
mod forged_requests;
mod guards;
mod helpers;
mod idempotency;
mod images;
mod metrics;
mod migrate;
mod openapi;
mod pages;
mod payments;
mod pipeline;
mod processes;
mod rate_limits;
mod redis_restart;
mod refunds;
mod restart;
mod sale_controls;
mod sandbox;
mod sessions;
mod shared_gate;
mod sign_out;
mod store;
