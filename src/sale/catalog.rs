//! What this process knows about products without asking anyone: which ids exist (so unknown
//! ids are turned away before the gate, against cache penetration), the name and price an
//! order copies, its event's guard, whether the product is in the gate, and the local sold-out
//! flag. It also keeps
//! the newest row of each product and every sale event: what shoppers see is made from these.

use super::SaleService;
use crate::domain::{Guard, Millis, Money, Product, ProductId, SaleEvent, SaleWindow};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// One known product.
pub(super) struct Entry {
    pub name: Arc<str>,
    pub sale_price: Money,
    pub window: SaleWindow,
    /// What a buyer must show besides a session: its event's guard.
    pub guard: Guard,
    /// In the gate (preheated).
    pub loaded: AtomicBool,
    /// Was in the gate, and the gate lost it (Redis lost its data): closed until it is rebuilt,
    /// which waits for the servers' counts of what they accepted (see `accepted.rs`).
    pub lost: AtomicBool,
    /// The gate said "sold out": answer locally until stock comes back.
    pub sold_out: AtomicBool,
}

/// Known products by id. Entries change only when the operator changes a product.
#[derive(Default)]
pub(super) struct Catalog {
    entries: RwLock<ById<ProductId, Arc<Entry>>>,
    /// The newest row read or written of each product: at most a catalog refresh old.
    rows: RwLock<ById<ProductId, Arc<Product>>>,
    /// Sale events by id. An event changes only when an operator ends it early or sets its
    /// guard.
    events: RwLock<ById<i64, SaleEvent>>,
}

/// A map by id, hashed with `foldhash` (seeded at random for each map) rather than the
/// standard library's SipHash: every buy looks its product up several times, and only the
/// operator adds ids.
type ById<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

impl Catalog {
    pub fn get(&self, id: ProductId) -> Option<Arc<Entry>> {
        cloned(&self.entries, &id)
    }

    /// A product's guard and window, copied out under the read lock: the guard check of every
    /// buy reads it.
    pub fn guard(&self, id: ProductId) -> Option<(Guard, SaleWindow)> {
        let entries = self.entries.read().expect("catalog lock poisoned");
        entries.get(&id).map(|entry| (entry.guard, entry.window))
    }

    /// The newest row of a product this process read or wrote.
    pub fn row(&self, id: ProductId) -> Option<Arc<Product>> {
        cloned(&self.rows, &id)
    }

    /// The newest rows of an event's products, in sale order (as the database lists them).
    pub fn rows_of_event(&self, event: i64) -> Vec<Arc<Product>> {
        let mut rows = cloned_where(&self.rows, |product| product.event_id == Some(event));
        rows.sort_by_key(|product| (product.window.start, product.id));
        rows
    }

    /// One sale event.
    pub fn event(&self, id: i64) -> Option<SaleEvent> {
        cloned(&self.events, &id)
    }

    /// Every sale event, in the order the database lists them (by start, then id).
    pub fn events(&self) -> Vec<SaleEvent> {
        let mut events = cloned_where(&self.events, |_| true);
        events.sort_by_key(|event| (event.window.start, event.id));
        events
    }

    /// Adds or refreshes a sale event.
    pub fn put_event(&self, event: SaleEvent) {
        self.events
            .write()
            .expect("catalog lock poisoned")
            .insert(event.id, event);
    }

    /// Adds or refreshes a product. An unchanged product keeps its entry, so flags set on it
    /// concurrently are never lost; a changed one gets a new entry with the flags carried over.
    /// The row is kept unless the one held is newer (a refresh that read before an update
    /// here finished after it).
    pub fn put(&self, product: &Product) {
        {
            let mut rows = self.rows.write().expect("catalog lock poisoned");
            if rows
                .get(&product.id)
                .is_none_or(|held| held.updated_at <= product.updated_at)
            {
                rows.insert(product.id, Arc::new(product.clone()));
            }
        }
        let mut map = self.entries.write().expect("catalog lock poisoned");
        let (loaded, lost, sold_out) = match map.get(&product.id) {
            Some(e)
                if *e.name == *product.name
                    && e.sale_price == product.sale_price
                    && e.window == product.window
                    && e.guard == product.guard =>
            {
                return;
            }
            Some(e) => (
                e.loaded.load(Ordering::SeqCst),
                e.lost.load(Ordering::SeqCst),
                e.sold_out.load(Ordering::SeqCst),
            ),
            None => (false, false, false),
        };
        map.insert(
            product.id,
            Arc::new(Entry {
                name: product.name.as_str().into(),
                sale_price: product.sale_price,
                window: product.window,
                guard: product.guard,
                loaded: AtomicBool::new(loaded),
                lost: AtomicBool::new(lost),
                sold_out: AtomicBool::new(sold_out),
            }),
        );
    }

    /// Products whose local sold-out flag is set.
    pub fn flagged_sold_out(&self) -> Vec<ProductId> {
        self.ids_where(|e| e.sold_out.load(Ordering::SeqCst))
    }

    pub fn mark_loaded(&self, id: ProductId, sold_out: bool) {
        if let Some(entry) = self.get(id) {
            entry.sold_out.store(sold_out, Ordering::SeqCst);
            entry.loaded.store(true, Ordering::SeqCst);
            entry.lost.store(false, Ordering::SeqCst);
        }
    }

    /// Marks a product the gate lost (see [`Entry::lost`]) until it is loaded again.
    pub fn mark_lost(&self, id: ProductId) {
        if let Some(entry) = self.get(id) {
            entry.loaded.store(false, Ordering::SeqCst);
            entry.lost.store(true, Ordering::SeqCst);
        }
    }

    /// Whether the gate lost the product and it is not loaded again yet.
    pub fn is_lost(&self, id: ProductId) -> bool {
        self.get(id)
            .is_some_and(|entry| entry.lost.load(Ordering::SeqCst))
    }

    /// Forgets that a product is in the gate (the gate may have lost it), so the next preheat
    /// loads it.
    pub fn mark_unloaded(&self, id: ProductId) {
        if let Some(entry) = self.get(id) {
            entry.loaded.store(false, Ordering::SeqCst);
        }
    }

    /// Clears the sold-out flag: stock came back.
    pub fn restock(&self, id: ProductId) {
        if let Some(entry) = self.get(id) {
            entry.sold_out.store(false, Ordering::SeqCst);
        }
    }

    /// Every known product.
    pub fn ids(&self) -> Vec<ProductId> {
        self.ids_where(|_| true)
    }

    /// The products in the gate.
    pub fn loaded(&self) -> Vec<ProductId> {
        self.ids_where(|e| e.loaded.load(Ordering::SeqCst))
    }

    pub fn due_for_preheat(&self, now: Millis, preheat_ms: i64) -> Vec<ProductId> {
        self.ids_where(|e| {
            !e.loaded.load(Ordering::SeqCst) && SaleService::is_due(&e.window, now, preheat_ms)
        })
    }

    /// The products whose entries pass `keep`.
    fn ids_where(&self, keep: impl Fn(&Entry) -> bool) -> Vec<ProductId> {
        self.entries
            .read()
            .expect("catalog lock poisoned")
            .iter()
            .filter(|(_, e)| keep(e))
            .map(|(id, _)| *id)
            .collect()
    }
}

/// The value under `key`, cloned out of the map's read lock.
fn cloned<K: Eq + Hash, V: Clone>(map: &RwLock<ById<K, V>>, key: &K) -> Option<V> {
    map.read().expect("catalog lock poisoned").get(key).cloned()
}

/// The values that pass `keep`, cloned out of the map's read lock, in no particular order.
fn cloned_where<K, V: Clone>(map: &RwLock<ById<K, V>>, keep: impl Fn(&V) -> bool) -> Vec<V> {
    let map = map.read().expect("catalog lock poisoned");
    map.values().filter(|value| keep(value)).cloned().collect()
}
