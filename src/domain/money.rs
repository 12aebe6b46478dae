//! Money as integer cents: prices and totals are exact, never floats.

use super::Refusal;
use serde::{Deserialize, Serialize};
use std::fmt;

/// An amount in cents (分) of the shop's currency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Money(i64);

/// Why a price was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a price must be between 0 and {max} cents", max = Money::MAX_CENTS)]
pub struct InvalidMoney;

impl Money {
    /// The largest price accepted (one hundred million in currency units): far above any
    /// real product, far below any overflow when multiplied by a quantity.
    pub const MAX_CENTS: i64 = 10_000_000_000;

    /// Parses cents from the edge of the system.
    pub fn from_cents(cents: i64) -> Result<Self, InvalidMoney> {
        if (0..=Self::MAX_CENTS).contains(&cents) {
            Ok(Self(cents))
        } else {
            Err(InvalidMoney)
        }
    }

    /// Parses an operator's price in cents: refused as `invalid_price`.
    pub fn price(cents: i64) -> Result<Self, Refusal> {
        Self::from_cents(cents).map_err(|e| Refusal::new("invalid_price", e.to_string()))
    }

    /// The amount in cents, for storage and arithmetic.
    pub fn cents(self) -> i64 {
        self.0
    }

    /// The total for `quantity` units. Bounded inputs make overflow impossible.
    pub fn times(self, quantity: u32) -> Money {
        Money(self.0 * i64::from(quantity))
    }
}

/// Formats as "199.00", the way prices are shown and sent to payment providers.
impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}", self.0 / 100, self.0 % 100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_cents_as_a_decimal_price() {
        assert_eq!(Money::from_cents(19_900).unwrap().to_string(), "199.00");
        assert_eq!(Money::from_cents(5).unwrap().to_string(), "0.05");
    }

    #[test]
    fn refuses_negative_and_absurd_prices() {
        assert_eq!(Money::from_cents(-1), Err(InvalidMoney));
        assert_eq!(Money::from_cents(Money::MAX_CENTS + 1), Err(InvalidMoney));
    }

    #[test]
    fn an_operators_price_out_of_range_is_refused_as_invalid_price() {
        assert_eq!(Money::price(0).unwrap().cents(), 0);
        for bad in [-1, Money::MAX_CENTS + 1] {
            let refusal = Money::price(bad).unwrap_err();
            assert_eq!(refusal.code, "invalid_price");
            assert_eq!(
                refusal.message,
                "a price must be between 0 and 10000000000 cents"
            );
        }
    }

    mod properties {
        use super::*;
        use crate::domain::Quantity;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Any integer is a price exactly when it is 0 to the maximum, and any price times
            /// any quantity a buy may ask for is exact.
            #[test]
            fn prices_are_bounded_and_totals_exact(cents in any::<i64>(), price in 0..=Money::MAX_CENTS, units in 1i64..=100) {
                prop_assert_eq!(Money::from_cents(cents).is_ok(), (0..=Money::MAX_CENTS).contains(&cents));
                let quantity = Quantity::parse(units).unwrap();
                let total = Money::from_cents(price).unwrap().times(quantity.get());
                prop_assert_eq!(Some(total.cents()), price.checked_mul(units));
            }
        }
    }
}
