//! Alipay's timestamps: `yyyy-MM-dd HH:mm:ss` in Beijing time (UTC+8, no daylight saving),
//! whatever the server's own time zone.

use crate::domain::Millis;
use chrono::{DateTime, FixedOffset, NaiveDateTime, TimeZone};

const FORMAT: &str = "%Y-%m-%d %H:%M:%S";

fn beijing() -> FixedOffset {
    FixedOffset::east_opt(8 * 3600).expect("UTC+8 is a valid offset")
}

/// Writes `at` as Alipay does, truncated to the second: a deadline written this way is never
/// later than the one it stands for.
pub fn format(at: Millis) -> String {
    let at = DateTime::from_timestamp_millis(at).unwrap_or_default();
    at.with_timezone(&beijing()).format(FORMAT).to_string()
}

/// Reads one of Alipay's timestamps; `None` when it is not one.
pub fn parse(text: &str) -> Option<Millis> {
    let naive = NaiveDateTime::parse_from_str(text, FORMAT).ok()?;
    let at = beijing().from_local_datetime(&naive).single()?;
    Some(at.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_beijing_time_to_the_second() {
        // 2026-11-24 00:15:00.999 UTC is 08:15:00 in Beijing.
        let at = 1_795_479_300_999;
        assert_eq!(format(at), "2026-11-24 08:15:00");
        assert_eq!(parse("2026-11-24 08:15:00"), Some(at - 999));
        assert_eq!(parse("2026-11-24T08:15:00"), None);
        assert_eq!(parse(""), None);
    }
}
