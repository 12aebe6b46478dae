//! Amounts as providers write them: yuan with exactly two decimals ("5999.00"). They are
//! read straight into cents, never through a float, so "0.10" is ten cents on every machine.

use crate::domain::Money;

/// Reads `"123.45"` as 12345 cents. Refuses anything else: a sign, missing or extra decimals,
/// spaces, exponents, or an amount [`Money`] does not accept.
pub fn parse_yuan(text: &str) -> Option<Money> {
    let (yuan, fen) = text.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(yuan) || yuan.len() > 12 || fen.len() != 2 || !digits(fen) {
        return None;
    }
    let cents = yuan.parse::<i64>().ok()? * 100 + fen.parse::<i64>().ok()?;
    Money::from_cents(cents).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_decimal_yuan_are_read_exactly_and_written_back_the_same() {
        for (text, cents) in [
            ("0.01", 1),
            ("0.10", 10),
            ("5999.00", 599_900),
            ("19.99", 1_999),
        ] {
            let money = parse_yuan(text).unwrap();
            assert_eq!(money.cents(), cents);
            assert_eq!(money.to_string(), text);
        }
    }

    #[test]
    fn anything_but_two_decimal_yuan_is_refused() {
        for bad in [
            "",
            "1",
            "1.0",
            "1.000",
            ".10",
            "-1.00",
            "+1.00",
            " 1.00",
            "1e2.00",
            "1.0a",
            "99999999999999.00",
        ] {
            assert_eq!(parse_yuan(bad), None, "{bad:?}");
        }
    }
}
