//! The built-in sandbox gateway (being built).
