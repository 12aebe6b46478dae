//! Who is asking: password hashing for accounts, signed session tokens that are checked without
//! any I/O, and the request extractors that turn a token into a user.

pub mod extract;
pub mod password;
pub mod token;

pub use extract::{AdminAuth, CurrentUser, SESSION_COOKIE};
pub use token::TokenSigner;
