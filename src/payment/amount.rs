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

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Every amount reads back from how it is written, to the cent.
            #[test]
            fn every_amount_reads_back_from_its_text(cents in 0..=Money::MAX_CENTS) {
                let money = Money::from_cents(cents).unwrap();
                prop_assert_eq!(parse_yuan(&money.to_string()), Some(money));
            }

            /// Whatever text comes in, what is read is digits, a point and two digits, worth
            /// exactly that many cents.
            #[test]
            fn only_two_decimal_yuan_are_read(text in "[0-9.+ e-]{0,16}|.{0,16}") {
                if let Some(money) = parse_yuan(&text) {
                    let (yuan, fen) = text.split_once('.').unwrap();
                    prop_assert!(yuan.bytes().all(|b| b.is_ascii_digit()) && !yuan.is_empty());
                    prop_assert!(fen.len() == 2 && fen.bytes().all(|b| b.is_ascii_digit()));
                    let cents = yuan.parse::<i64>().unwrap() * 100 + fen.parse::<i64>().unwrap();
                    prop_assert_eq!(money.cents(), cents);
                }
            }
        }
    }
}
