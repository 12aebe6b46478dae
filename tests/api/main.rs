//! One integration test binary: every test starts the real server on port 0 with its own
//! SQLite file and talks to it over HTTP.

mod admin;
mod bad_input;
mod buying;
mod deadlines;
mod helpers;
mod pages;
mod restart;
mod sessions;
