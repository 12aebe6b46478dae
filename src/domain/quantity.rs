//! How many units one buy asks for.

use std::fmt;

/// A quantity of 1 up to [`Quantity::MAX`], checked once at the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity(u32);

/// Why a quantity was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("quantity must be a whole number from 1 to {max}", max = Quantity::MAX)]
pub struct InvalidQuantity;

impl Quantity {
    /// No flash sale sells more than this many units in one order; anything larger is a
    /// mistake or an attack, not a purchase.
    pub const MAX: u32 = 100;

    /// Parses any integer a client may send.
    pub fn parse(value: i64) -> Result<Self, InvalidQuantity> {
        match u32::try_from(value) {
            Ok(q) if (1..=Self::MAX).contains(&q) => Ok(Self(q)),
            _ => Err(InvalidQuantity),
        }
    }

    /// The number of units.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_one_to_max() {
        assert_eq!(Quantity::parse(1).unwrap().get(), 1);
        assert_eq!(Quantity::parse(100).unwrap().get(), 100);
    }

    #[test]
    fn refuses_zero_negative_and_huge() {
        for bad in [0, -1, 101, 1_000_000_000, i64::MAX, i64::MIN] {
            assert_eq!(Quantity::parse(bad), Err(InvalidQuantity), "{bad}");
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Any integer is a quantity exactly when it is 1 to 100, and keeps its value.
            #[test]
            fn a_quantity_is_one_to_a_hundred_and_keeps_its_value(value in any::<i64>(), small in -5i64..110) {
                for v in [value, small] {
                    match Quantity::parse(v) {
                        Ok(q) => prop_assert!((1..=100).contains(&v) && i64::from(q.get()) == v),
                        Err(_) => prop_assert!(!(1..=100).contains(&v)),
                    }
                }
            }
        }
    }
}
