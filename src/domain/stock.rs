//! The units an operator puts on sale, and how many one buyer may hold: each bounded, so no
//! count an operator types can overflow a sum or sell without end.

use super::{Quantity, Refusal};

/// The most units one product may hold: far above any flash sale, far below overflow.
pub const MAX_STOCK: i64 = 100_000_000;

/// The units a new product goes on sale with: 0 to [`MAX_STOCK`] (none at first is allowed,
/// to add them later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stock(i64);

/// Units added to a product's stock: 1 to [`MAX_STOCK`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddedStock(i64);

/// How many parts a product's stock is split into in a shared gate, each decided on its own
/// (on its own shard of a Redis Cluster): 1 to [`StockBuckets::MAX`]. More buckets spread one
/// hot product's buys over more Redis cores; an in-process gate ignores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockBuckets(u8);

/// How many units one buyer may hold in orders of a product that are not cancelled: 1 to
/// [`Quantity::MAX`], since no buy may ask for more than that either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerUserLimit(u32);

impl Stock {
    /// Parses an operator's stock (the field `stock`).
    pub fn parse(units: i64) -> Result<Self, Refusal> {
        if (0..=MAX_STOCK).contains(&units) {
            Ok(Self(units))
        } else {
            Err(Refusal::new(
                "invalid_stock",
                format!("stock must be 0 to {MAX_STOCK}"),
            ))
        }
    }

    /// The number of units.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl AddedStock {
    /// Parses the units an operator adds (the field `quantity`).
    pub fn parse(units: i64) -> Result<Self, Refusal> {
        if (1..=MAX_STOCK).contains(&units) {
            Ok(Self(units))
        } else {
            Err(Refusal::new(
                "invalid_quantity",
                format!("quantity must be 1 to {MAX_STOCK}"),
            ))
        }
    }

    /// The number of units.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl StockBuckets {
    /// The most buckets one product may have.
    pub const MAX: u8 = 64;

    /// One bucket: the whole stock decided in one place.
    pub const ONE: Self = Self(1);

    /// Parses an operator's bucket count (the field `buckets`).
    pub fn parse(buckets: i64) -> Result<Self, Refusal> {
        match u8::try_from(buckets) {
            Ok(n) if (1..=Self::MAX).contains(&n) => Ok(Self(n)),
            _ => Err(Refusal::new(
                "invalid_buckets",
                format!("buckets must be 1 to {}", Self::MAX),
            )),
        }
    }

    /// The number of buckets.
    pub fn get(self) -> u8 {
        self.0
    }
}

impl PerUserLimit {
    /// Parses an operator's limit (the field `per_user_limit`).
    pub fn parse(units: i64) -> Result<Self, Refusal> {
        Quantity::parse(units)
            .map(|q| Self(q.get()))
            .map_err(|_| Refusal::new("invalid_limit", "per_user_limit must be 1 to 100"))
    }

    /// The number of units.
    pub fn get(self) -> u32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_one_to_sixty_four() {
        assert_eq!(StockBuckets::parse(1).map(StockBuckets::get), Ok(1));
        assert_eq!(StockBuckets::parse(64).map(StockBuckets::get), Ok(64));
        for refused in [0, 65, -1, 256, i64::MAX] {
            assert_eq!(
                StockBuckets::parse(refused).unwrap_err().code,
                "invalid_buckets"
            );
        }
    }

    #[test]
    fn stock_is_zero_to_the_most_one_product_holds() {
        assert_eq!(Stock::parse(0).unwrap().get(), 0);
        assert_eq!(Stock::parse(MAX_STOCK).unwrap().get(), MAX_STOCK);
        for bad in [-1, MAX_STOCK + 1, i64::MIN, i64::MAX] {
            let refusal = Stock::parse(bad).unwrap_err();
            assert_eq!(refusal.code, "invalid_stock", "{bad}");
            assert_eq!(refusal.message, "stock must be 0 to 100000000");
        }
    }

    #[test]
    fn added_stock_is_at_least_one_unit() {
        assert_eq!(AddedStock::parse(1).unwrap().get(), 1);
        assert_eq!(AddedStock::parse(MAX_STOCK).unwrap().get(), MAX_STOCK);
        for bad in [0, -5, MAX_STOCK + 1, i64::MIN] {
            let refusal = AddedStock::parse(bad).unwrap_err();
            assert_eq!(refusal.code, "invalid_quantity", "{bad}");
            assert_eq!(refusal.message, "quantity must be 1 to 100000000");
        }
    }

    #[test]
    fn a_per_user_limit_is_one_to_a_hundred() {
        assert_eq!(PerUserLimit::parse(1).unwrap().get(), 1);
        assert_eq!(PerUserLimit::parse(100).unwrap().get(), 100);
        for bad in [0, -1, 101, i64::from(u32::MAX) + 1] {
            let refusal = PerUserLimit::parse(bad).unwrap_err();
            assert_eq!(refusal.code, "invalid_limit", "{bad}");
            assert_eq!(refusal.message, "per_user_limit must be 1 to 100");
        }
    }
}
