//! Secrets kept out of messages and logs, and what a client sent kept from forging log lines.

use std::fmt;

/// The URL as it may appear in messages and logs: without user names, passwords and query
/// options (`?pass=` exists), also inside a list of URLs and in malformed input.
pub fn url(url: &str) -> String {
    let mut shown = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        shown.push_str(head);
        // This URL runs until the next scheme (or the end); its credentials end at its last '@'.
        let end = tail.find("://").map_or(tail.len(), |next| {
            tail[..next].rfind(',').map_or(next, |comma| comma + 1)
        });
        let this = &tail[..end];
        let this = this.rfind('@').map_or(this, |at| &this[at + 1..]);
        match this.find('?') {
            Some(query) => {
                shown.push_str(&this[..query]);
                shown.push_str("?…");
                // Keep a following list separator, drop the options themselves.
                if this.ends_with(',') {
                    shown.push(',');
                }
            }
            None => shown.push_str(this),
        }
        rest = &tail[end..];
    }
    // No scheme: show a bare host list, but never anything that looks like credentials.
    match rest.rfind('@') {
        Some(at) => shown.push_str(&rest[at + 1..]),
        None => shown.push_str(rest),
    }
    shown
}

/// A writer that escapes, on the way to the one it wraps, every character that breaks or
/// disguises a log line: control characters (`\n` and `\r` among them, the terminal's escape,
/// the C1 controls), the line and paragraph separators, and the bidirectional overrides that
/// show text in another order than it is written. Each becomes an escape (`\n`, `\u{1b}`);
/// everything else, a backslash included, passes as it is.
pub struct Escaping<W>(pub W);

impl<W: fmt::Write> fmt::Write for Escaping<W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let mut rest = text;
        while let Some(at) = rest.find(breaks_lines) {
            let (plain, tail) = rest.split_at(at);
            self.0.write_str(plain)?;
            let mut chars = tail.chars();
            if let Some(c) = chars.next() {
                match c {
                    '\n' | '\r' | '\t' => write!(self.0, "{}", c.escape_default())?,
                    _ => write!(self.0, "\\u{{{:x}}}", u32::from(c))?,
                }
            }
            rest = chars.as_str();
        }
        self.0.write_str(rest)
    }
}

/// Whether `c` may break or disguise a log line when written as it is.
fn breaks_lines(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::fmt::Write as _;

    #[test]
    fn escaped_text_stays_on_its_line() {
        let shown = |text: &str| {
            let mut shown = String::new();
            Escaping(&mut shown).write_str(text).unwrap();
            shown
        };
        assert_eq!(
            shown("x\n2026-11-27T09:00:00Z ERROR forged"),
            "x\\n2026-11-27T09:00:00Z ERROR forged"
        );
        assert_eq!(shown("a\rb\tc"), "a\\rb\\tc");
        assert_eq!(shown("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(shown("\u{85}\u{2028}\u{2029}"), "\\u{85}\\u{2028}\\u{2029}");
        assert_eq!(shown("\u{202e}txt.exe"), "\\u{202e}txt.exe");
        assert_eq!(
            shown("plain, 秒杀 and \\n as written"),
            "plain, 秒杀 and \\n as written"
        );
        assert_eq!(shown("\0\u{7f}\u{9f}"), "\\u{0}\\u{7f}\\u{9f}");
    }

    #[test]
    fn messages_never_show_credentials() {
        assert_eq!(url("redis://:pw@h:6379/0"), "redis://h:6379/0");
        assert_eq!(url("redis://u:p@w@h:6379"), "redis://h:6379");
        assert_eq!(
            url("redis+cluster://u:pw@a:7000,b:7001"),
            "redis+cluster://a:7000,b:7001"
        );
        assert_eq!(
            url("redis://u:pw@a:7000,redis://u:pw@b:7001"),
            "redis://a:7000,redis://b:7001"
        );
        assert_eq!(
            url("redis+unix:///run/redis.sock?pass=pw"),
            "redis+unix:///run/redis.sock?…"
        );
        assert_eq!(url("u:pw@h:6379"), "h:6379");
        assert_eq!(url("redis://h:6379"), "redis://h:6379");
        assert_eq!(
            url("postgres://app:pw@db:5432/shop"),
            "postgres://db:5432/shop"
        );
        assert_eq!(url("sqlite://seckill.db"), "sqlite://seckill.db");
    }
}
