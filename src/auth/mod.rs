//! Who is asking: password hashing for accounts (bounded, so sign-ins cannot take the server's
//! memory), signed session tokens that are checked without any I/O, the sessions ended
//! before their tokens expire, and the buy tokens and puzzles of guarded sales. The request extractors
//! that turn a token into a user are HTTP's (`http::extract`).

pub mod guard;
pub mod password;
pub mod revocation;
pub mod token;

pub use token::TokenSigner;
