//! For property tests only: one-character edits of a text, to show that a signed token, a
//! signed form or a checked name stops passing when anything in it changes.

use proptest::prelude::*;
use proptest::sample::Index;

/// One change to a text: a character replaced, removed, or added.
#[derive(Debug, Clone)]
pub enum Edit {
    Replace(Index, char),
    Remove(Index),
    Insert(Index, char),
}

/// Any edit, with characters from the whole of Unicode and, as often, from the few that mean
/// something to the parsers (separators, base64's alphabet, padding).
pub fn edit() -> impl Strategy<Value = Edit> {
    let char = prop_oneof![any::<char>(), prop::sample::select(SPECIAL.to_vec())];
    prop_oneof![
        (any::<Index>(), char.clone()).prop_map(|(at, c)| Edit::Replace(at, c)),
        any::<Index>().prop_map(Edit::Remove),
        (any::<Index>(), char).prop_map(|(at, c)| Edit::Insert(at, c)),
    ]
}

/// Characters the parsers split on or decode.
const SPECIAL: [char; 14] = [
    '.', ':', '=', '&', '+', '/', '-', '_', 'A', 'a', '0', ' ', '%', '\0',
];

impl Edit {
    /// `text` with this edit made, or `None` when the edit leaves it as it was (a character
    /// replaced by itself, or nothing to remove).
    pub fn apply(&self, text: &str) -> Option<String> {
        let mut chars: Vec<char> = text.chars().collect();
        match *self {
            Self::Replace(at, c) if !chars.is_empty() => {
                let i = at.index(chars.len());
                (chars[i] != c).then(|| chars[i] = c)?;
            }
            Self::Remove(at) if !chars.is_empty() => {
                chars.remove(at.index(chars.len()));
            }
            Self::Insert(at, c) => chars.insert(at.index(chars.len() + 1), c),
            _ => return None,
        }
        Some(chars.into_iter().collect())
    }
}
