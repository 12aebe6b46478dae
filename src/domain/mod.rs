//! Pure types and rules of a flash sale, with no I/O: what a product, an event, an order and a
//! user are, and which values are valid. Input is parsed into these types once, at the edge;
//! the rest of the system trusts them. An operator's input is parsed here too, whichever door
//! it comes through, and refused with one [`Refusal`] shape.

#[cfg(test)]
pub mod edits;
pub mod idempotency;
pub mod image;
pub mod money;
pub mod network;
pub mod operator;
pub mod order;
pub mod product;
pub mod quantity;
pub mod refusal;
pub mod stock;
pub mod text;
pub mod user;

pub use idempotency::{IdempotencyKey, InvalidIdempotencyKey};
pub use image::{Image, ImageError, ImageFormat, ImageId};
pub use money::Money;
pub use network::network;
pub use operator::Operator;
pub use order::{Order, OrderId, OrderStatus};
pub use product::{Guard, InvalidGuard, Product, ProductId, SaleEvent, SaleStatus, SaleWindow};
pub use quantity::Quantity;
pub use refusal::Refusal;
pub use stock::{AddedStock, MAX_STOCK, PerUserLimit, Stock, StockBuckets};
pub use text::{EventTitle, ImageUrl, ProductName};
pub use user::{NamePrefix, Password, UserId, Username};

/// Milliseconds since the Unix epoch, the one time unit stored and compared everywhere: it is
/// portable across SQLite, MySQL and PostgreSQL and cheap to compare on the hot path.
pub type Millis = i64;
