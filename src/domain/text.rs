//! Text an operator writes and shoppers read: a product's name, a sale event's title, a
//! product's image URL. Each is checked once, where it comes in, so no shopper is shown text
//! that reads other than it is stored.

use super::Refusal;
use std::fmt;
use unicode_properties::{GeneralCategory, UnicodeEmoji, UnicodeGeneralCategory};

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
            || raw.chars().any(char::is_whitespace)
            || any_hidden(raw)
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
    if any_hidden(trimmed) {
        return Err(Refusal::new(
            "invalid_text",
            format!(
                "{field} may not hold control, format, private-use, unassigned or invisible \
                 characters, nor line or paragraph separators (they can make a shopper read \
                 another text than the one shown)"
            ),
        ));
    }
    Ok(trimmed.to_owned())
}

/// Whether `text` holds a character that is [`hidden`], not counting the emoji joiner between
/// two emoji and a variation selector after an emoji (as in 👩‍💻 and ❤️), which only choose
/// how the emoji is drawn.
fn any_hidden(text: &str) -> bool {
    let mut before = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let drawn_emoji = match c {
            '\u{200D}' => {
                before.is_some_and(pictograph) && chars.peek().copied().is_some_and(pictograph)
            }
            '\u{FE0E}' | '\u{FE0F}' => before.is_some_and(|b: char| b.is_emoji_char()),
            _ => false,
        };
        if !drawn_emoji && hidden(c) {
            return true;
        }
        before = Some(c);
    }
    false
}

/// An emoji a joiner may join: not the ASCII digits and signs that are emoji only in keycaps.
fn pictograph(c: char) -> bool {
    !c.is_ascii() && c.is_emoji_char()
}

/// A character that shows nothing yet changes what is shown, or shows as nothing: control and
/// format characters (bidi overrides and isolates, as in "Trojan Source", soft hyphens, zero
/// widths, tags), line and paragraph separators, private-use and unassigned code points, and
/// the other default-ignorable ones (the Hangul fillers, variation selectors, the grapheme
/// joiner). Space separators, U+3000 included, are allowed.
fn hidden(c: char) -> bool {
    use GeneralCategory::{
        Control, Format, LineSeparator, ParagraphSeparator, PrivateUse, Surrogate, Unassigned,
    };
    matches!(
        c.general_category(),
        Control | Format | LineSeparator | ParagraphSeparator | PrivateUse | Surrogate | Unassigned
    ) || matches!(c,
        '\u{034F}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}' | '\u{180B}'..='\u{180F}'
        | '\u{2800}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FFA0}' | '\u{E0100}'..='\u{E01EF}')
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
            "Te\u{00AD}a",
            "Te\u{034F}a",
            "\u{115F}",
            "Tea\u{2028}Cake",
            "Tea\u{2029}Cake",
            "\u{3164}",
            "\u{FFA0}",
            "Tea\u{FFF9}x\u{FFFB}",
            "Tea\u{E0041}\u{E007F}",
            "Tea\u{E000}",
            "Tea\u{0378}",
            "Tea\u{2800}",
            "Tea\u{FE0F}",
            "Te\u{200D}a",
            "\u{1F469}\u{200D}",
            "\u{200D}\u{1F4BB}",
            "\u{8FB9}\u{E0100}",
        ] {
            let refusal = ProductName::parse(bad).unwrap_err();
            assert_eq!(refusal.code, "invalid_text", "{bad:?}");
            assert!(refusal.message.starts_with("name may not hold"), "{bad:?}");
            assert_eq!(code(EventTitle::parse(bad)), "invalid_text", "{bad:?}");
        }
    }

    #[test]
    fn spaces_emoji_and_every_script_are_kept() {
        for good in [
            "限时\u{3000}秒杀",
            "Tea\u{00A0}for\u{2003}two\u{202F}cups",
            "\u{1F469}\u{200D}\u{1F4BB} desk",
            "\u{2764}\u{FE0F} gift",
            "1\u{FE0F}\u{20E3} first",
            "\u{1F44D}\u{1F3FD} thumbs",
            "\u{1F1E8}\u{1F1F3} 茶",
            "한국 차",
            "شاي أخضر",
            "Café crème",
        ] {
            assert_eq!(ProductName::parse(good).unwrap().as_str(), good);
            assert_eq!(EventTitle::parse(good).unwrap().as_str(), good);
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
            "/a\u{00AD}.png",
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
