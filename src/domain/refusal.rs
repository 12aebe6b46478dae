//! Why an operator's input was refused: one shape for every field an operator fills in, so the
//! admin API and the console, which both parse into the same types, give the same verdict with
//! the same code and words.

use std::borrow::Cow;

/// An operator's value refused: a stable machine-readable `code` (the API contract, e.g.
/// `invalid_text`) and a message for the person who typed it, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// What kind of mistake, for programs: the API answers it as the error's `code`.
    pub code: &'static str,
    /// What is wrong and what is allowed, for people.
    pub message: Cow<'static, str>,
}

impl Refusal {
    /// A refusal with its code and message.
    pub fn new(code: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}
