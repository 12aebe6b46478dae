//! Secrets kept out of messages and logs.

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

#[cfg(test)]
mod tests {
    use super::*;

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
