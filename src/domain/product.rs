//! Products on sale and the sale events (场次) that group them.

use super::{Millis, Money, Refusal, StockBuckets};
use serde::{Deserialize, Serialize};

/// A product's database id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProductId(pub i64);

/// Where a sale stands at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SaleStatus {
    Upcoming,
    Live,
    Ended,
}

impl SaleStatus {
    /// The wire and template spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Upcoming => "upcoming",
            Self::Live => "live",
            Self::Ended => "ended",
        }
    }
}

/// The half-open interval `[start, end)` in which buying is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaleWindow {
    pub start: Millis,
    pub end: Millis,
}

/// Why a sale window was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a sale must end after it starts")]
pub struct InvalidWindow;

/// The earliest and latest times an operator's sale may name (2000-01-01 and 2100-01-01 UTC):
/// far outside any real sale, and a typo of a year is refused instead of making a sale that
/// never opens.
const SANE_TIMES: std::ops::Range<Millis> = 946_684_800_000..4_102_444_800_000;

impl SaleWindow {
    /// Parses the window an operator gives a sale (the fields `starts_at` and `ends_at`): it
    /// ends after it starts, and both lie between 2000 and 2100.
    pub fn parse(start: Millis, end: Millis) -> Result<Self, Refusal> {
        if !SANE_TIMES.contains(&start) || !SANE_TIMES.contains(&end) {
            return Err(Refusal::new(
                "invalid_window",
                "starts_at and ends_at must lie between 2000 and 2100",
            ));
        }
        Self::new(start, end).map_err(|e| Refusal::new("invalid_window", e.to_string()))
    }

    /// Builds a window that ends after it starts.
    pub fn new(start: Millis, end: Millis) -> Result<Self, InvalidWindow> {
        if start < end {
            Ok(Self { start, end })
        } else {
            Err(InvalidWindow)
        }
    }

    /// The status at `now`; the start instant is live, the end instant is ended.
    pub fn status(&self, now: Millis) -> SaleStatus {
        if now < self.start {
            SaleStatus::Upcoming
        } else if now < self.end {
            SaleStatus::Live
        } else {
            SaleStatus::Ended
        }
    }
}

/// A sale event (场次): a time slot, e.g. 10:00–12:00, whose products go on sale together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaleEvent {
    pub id: i64,
    pub title: String,
    pub window: SaleWindow,
    /// What a buyer of its products must show besides a session.
    pub guard: Guard,
}

/// How a sale event keeps scripts that skip the sale page from buying: a guarded event's buys
/// must carry a buy token, which the page fetches shortly before the start, and with
/// `Challenge` the token is handed out only for the answer to a proof-of-work puzzle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Guard {
    /// A session is enough.
    #[default]
    None,
    /// A buy token is needed.
    Token,
    /// A buy token is needed, and fetching one needs a solved puzzle.
    Challenge,
}

/// Why a guard's name was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("guard must be none, token or challenge")]
pub struct InvalidGuard;

/// An operator's guard that is not one: `invalid_guard`.
impl From<InvalidGuard> for Refusal {
    fn from(e: InvalidGuard) -> Self {
        Refusal::new("invalid_guard", e.to_string())
    }
}

impl Guard {
    /// Every guard, weakest first.
    pub const ALL: [Self; 3] = [Self::None, Self::Token, Self::Challenge];

    /// Parses the wire and database spelling.
    pub fn parse(raw: &str) -> Result<Self, InvalidGuard> {
        Self::ALL
            .into_iter()
            .find(|guard| guard.as_str() == raw)
            .ok_or(InvalidGuard)
    }

    /// The wire and database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Token => "token",
            Self::Challenge => "challenge",
        }
    }

    /// Whether a buy needs a buy token.
    pub fn needs_token(self) -> bool {
        self != Self::None
    }
}

/// A product as the shop defines it. `stock` is what the database still has to sell: each
/// persisted order takes from it with a guarded decrement, each cancelled order gives back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Product {
    pub id: ProductId,
    pub event_id: Option<i64>,
    pub name: String,
    pub image_url: String,
    pub original_price: Money,
    pub sale_price: Money,
    /// Units ever put on sale (initial stock plus stock added later).
    pub stock_total: i64,
    /// Units not yet taken by a live order.
    pub stock: i64,
    /// How many units one user may hold in orders that are not cancelled.
    pub per_user_limit: u32,
    /// How many buckets a shared gate splits its stock into, each on its own Redis shard, so
    /// the buys of one hot product are not all decided by one Redis core. Fixed once the
    /// product is in the gate (`gate_loaded_at`): the gate's buckets hold its stock and buyers.
    pub buckets: StockBuckets,
    pub window: SaleWindow,
    /// When an operator paused buying, which stays refused until they resume it; `None` while
    /// buying follows the window alone.
    pub paused_at: Option<Millis>,
    /// When the product was first loaded into the stock gate: a gate found without it since
    /// has lost it.
    pub gate_loaded_at: Option<Millis>,
    /// Its event's guard, read with the product (`None` without an event).
    pub guard: Guard,
    pub created_at: Millis,
    pub updated_at: Millis,
}

impl Product {
    /// Whether an operator paused buying.
    pub fn is_paused(&self) -> bool {
        self.paused_at.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_live_from_its_start_until_just_before_its_end() {
        let w = SaleWindow::new(100, 200).unwrap();
        assert_eq!(w.status(99), SaleStatus::Upcoming);
        assert_eq!(w.status(100), SaleStatus::Live);
        assert_eq!(w.status(199), SaleStatus::Live);
        assert_eq!(w.status(200), SaleStatus::Ended);
    }

    #[test]
    fn guards_read_back_as_they_are_written() {
        for guard in Guard::ALL {
            assert_eq!(Guard::parse(guard.as_str()), Ok(guard));
        }
        assert_eq!(Guard::parse("None"), Err(InvalidGuard));
        assert_eq!(Guard::parse(""), Err(InvalidGuard));
        assert_eq!(Guard::default(), Guard::None);
    }

    #[test]
    fn a_window_must_end_after_it_starts() {
        assert_eq!(SaleWindow::new(5, 5), Err(InvalidWindow));
    }

    #[test]
    fn an_operators_window_ends_after_it_starts_between_2000_and_2100() {
        let start = 1_800_000_000_000;
        assert_eq!(
            SaleWindow::parse(start, start + 1),
            Ok(SaleWindow::new(start, start + 1).unwrap())
        );
        let refusal = SaleWindow::parse(start, start).unwrap_err();
        assert_eq!(refusal.code, "invalid_window");
        assert_eq!(refusal.message, "a sale must end after it starts");
        for (a, b) in [
            (0, start),
            (start, 4_102_444_800_000),
            (946_684_799_999, start),
            (start, i64::MAX),
            (i64::MIN, start),
        ] {
            let refusal = SaleWindow::parse(a, b).unwrap_err();
            assert_eq!(refusal.code, "invalid_window", "{a}..{b}");
            assert_eq!(
                refusal.message,
                "starts_at and ends_at must lie between 2000 and 2100"
            );
        }
    }

    #[test]
    fn an_operators_unknown_guard_is_refused_as_invalid_guard() {
        let refusal = Refusal::from(Guard::parse("captcha").unwrap_err());
        assert_eq!(refusal.code, "invalid_guard");
        assert_eq!(refusal.message, "guard must be none, token or challenge");
    }
}
