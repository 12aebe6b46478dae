//! The audit log (who changed what, when), written by the service method that makes an
//! operator's change, so the change is recorded whichever door it came through. Each entry
//! names the ids changed; a repeat that changes nothing (pausing a paused product) is not
//! recorded. This file calls no other of `sale/`: every operator's change calls it.

use super::SaleService;
use crate::domain::Operator;
use crate::store::{AuditEntry, StoreError};

/// How many of the latest entries an operator is shown.
const SHOWN: i64 = 200;

impl SaleService {
    /// Records `action`, done by `by` just now. The change is made already, so an entry that
    /// cannot be written is reported in the server's log instead of failing the change.
    pub(super) async fn record_change(&self, by: &Operator, action: String) {
        let entry = AuditEntry {
            actor: by.to_string(),
            action,
            at: self.now(),
        };
        if let Err(e) = self.store.record_audit(&entry).await {
            tracing::error!(error = %e, action = %entry.action, "could not write the audit log");
        }
    }

    /// The latest changes, newest first.
    pub async fn audit_log(&self) -> Result<Vec<AuditEntry>, StoreError> {
        self.store.audit_log(SHOWN).await
    }
}
