//! Text an operator writes and shoppers read: a product's name, a sale event's title, a
//! product's image URL. Each is checked once, where it comes in, so no shopper is shown text
//! that reads other than it is stored.

use super::Refusal;
use std::fmt;

/// A product's name: 1 to 200 characters once trimmed, none of them [`hidden`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductName(String);

/// A sale event's title: 1 to 100 characters once trimmed, none of them [`hidden`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTitle(String);

/// Where a product's picture is: a path on this site (`/…`, not `//…`) or an `http(s)` URL, at
/// most 500 bytes, with no whitespace and nothing [`hidden`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageUrl(String);

impl ProductName {
    /// The longest name, in characters: a sale page's card shows it whole.
    pub const MAX_CHARS: usize = 200;

    /// Parses an operator's name for a product (the field `name`).
    pub fn parse(raw: &str) -> Result<Self, Refusal> {
        shown_text(raw, "name", Self::MAX_CHARS).map(Self)
    }

    /// The name as stored and shown.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl EventTitle {
    /// The longest title, in characters: it labels a tab on the sale page.
    pub const MAX_CHARS: usize = 100;

    /// Parses an operator's title for a sale event (the field `title`).
    pub fn parse(raw: &str) -> Result<Self, Refusal> {
        shown_text(raw, "title", Self::MAX_CHARS).map(Self)
    }

    /// The title as stored and shown.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl ImageUrl {
    /// The longest URL, in bytes.
    pub const MAX_BYTES: usize = 500;

    /// Parses an operator's image URL (the field `image_url`), as given: it is not trimmed.
    pub fn parse(raw: &str) -> Result<Self, Refusal> {
        let ok_scheme = ["/", "https://", "http://"]
            .iter()
            .any(|p| raw.starts_with(p))
            && !raw.starts_with("//");
        if !ok_scheme
            || raw.len() > Self::MAX_BYTES
            || raw.chars().any(|c| c.is_whitespace() || hidden(c))
        {
            return Err(Refusal::new(
                "invalid_image_url",
                "image_url must be a path starting with / or an http(s) URL",
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The URL as stored and put in pages.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ImageUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `raw` trimmed, if it has 1 to `max` characters and none [`hidden`]; `field` names it in
/// the refusal.
fn shown_text(raw: &str, field: &'static str, max: usize) -> Result<String, Refusal> {
    let trimmed = raw.trim();
    if trimmed.is_empty() || trimmed.chars().count() > max {
        return Err(Refusal::new(
            "invalid_text",
            format!("{field} must have 1 to {max} characters"),
        ));
    }
    if trimmed.chars().any(hidden) {
        return Err(Refusal::new(
            "invalid_text",
            format!(
                "{field} may not hold control characters or invisible direction and joining \
                 marks (they can make a shopper read another text than the one shown)"
            ),
        ));
    }
    Ok(trimmed.to_owned())
}

/// A character that shows nothing yet changes what is shown: control characters, and the
/// Unicode marks that reorder text (bidi overrides and isolates, as in "Trojan Source") or
/// hide between letters.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(refused: Result<impl fmt::Debug, Refusal>) -> &'static str {
        refused.unwrap_err().code
    }

    #[test]
    fn names_and_titles_are_kept_trimmed() {
        assert_eq!(ProductName::parse("  Tea  ").unwrap().as_str(), "Tea");
        assert_eq!(EventTitle::parse("10:00\t").unwrap().as_str(), "10:00");
        assert!(
            ProductName::parse(&"字".repeat(200)).is_ok(),
            "characters, not bytes"
        );
        assert!(EventTitle::parse(&"x".repeat(100)).is_ok());
    }

    #[test]
    fn an_empty_or_long_name_or_title_is_refused_naming_its_field() {
        for refused in [
            ProductName::parse("").map(|_| ()),
            ProductName::parse("   ").map(|_| ()),
            ProductName::parse(&"x".repeat(201)).map(|_| ()),
        ] {
            let refusal = refused.unwrap_err();
            assert_eq!(refusal.code, "invalid_text");
            assert_eq!(refusal.message, "name must have 1 to 200 characters");
        }
        let refusal = EventTitle::parse(&"x".repeat(101)).unwrap_err();
        assert_eq!(refusal.message, "title must have 1 to 100 characters");
    }

    #[test]
    fn text_with_hidden_characters_is_refused() {
        for bad in [
            "Tea\u{202E}gnp.exe",
            "Te\u{200B}a",
            "Tea\u{2066}x",
            "Te\u{0007}a",
            "Tea\nCake",
            "\u{FEFF}Tea",
        ] {
            let refusal = ProductName::parse(bad).unwrap_err();
            assert_eq!(refusal.code, "invalid_text", "{bad:?}");
            assert!(refusal.message.starts_with("name may not hold"), "{bad:?}");
            assert_eq!(code(EventTitle::parse(bad)), "invalid_text", "{bad:?}");
        }
    }

    #[test]
    fn image_urls_are_site_paths_or_http_urls() {
        for good in [
            "/static/img/gift.svg",
            "https://cdn.example/a.png",
            "http://x/y",
        ] {
            assert_eq!(ImageUrl::parse(good).unwrap().as_str(), good);
        }
        let long = format!("/{}", "x".repeat(500));
        for bad in [
            "",
            "//evil.example/a.png",
            "javascript:alert(1)",
            "data:image/png;base64,AAAA",
            "ftp://x/y",
            "/a b.png",
            " /a.png",
            "/a\u{202E}.png",
            long.as_str(),
        ] {
            let refusal = ImageUrl::parse(bad).unwrap_err();
            assert_eq!(refusal.code, "invalid_image_url", "{bad:?}");
            assert_eq!(
                refusal.message,
                "image_url must be a path starting with / or an http(s) URL"
            );
        }
        assert!(
            ImageUrl::parse(&long[..500]).is_ok(),
            "500 bytes is the most"
        );
    }
}
