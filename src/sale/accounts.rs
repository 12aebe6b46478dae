//! The operator's accounts: finding shoppers' accounts by name, and disabling an abusive one or
//! enabling it again, each change recorded in the audit log with who made it. Accounts are not
//! deleted: orders, payments and kept pay answers name their buyer's id, and a disabled account
//! keeps them readable while it can do nothing.
//!
//! The database holds the disable and its cut-off of the account's tokens; every server reads
//! the cut-offs from it, and the caller hands this server's own the cut-off at once.

use super::{AdminError, Controlled, SaleService};
use crate::domain::{NamePrefix, Operator, UserId};
use crate::store::{StoreError, UserAccount, UserCutoff, UserSearch};

impl SaleService {
    /// The accounts whose names begin with `name` (every account for an empty one), newest
    /// first, at most `limit`.
    pub async fn users(
        &self,
        name: &NamePrefix,
        limit: i64,
    ) -> Result<Vec<UserAccount>, StoreError> {
        let search = UserSearch {
            name_prefix: name.get(),
            limit,
        };
        self.store.search_users(&search).await
    }

    /// Disables `cutoff.user` for `by`: its sign-ins are refused and its tokens issued by
    /// `cutoff.cut_at` are cut off. Disabling a disabled account changes nothing.
    pub async fn disable_user(
        &self,
        by: &Operator,
        cutoff: &UserCutoff,
    ) -> Result<Controlled<UserAccount>, AdminError> {
        let (user, changed) = self
            .store
            .disable_user(cutoff)
            .await?
            .ok_or(AdminError::UnknownUser)?;
        let action = format!("disabled user {} \"{}\"", user.id.0, user.username);
        Ok(Controlled::recorded(self, by, user, changed, action).await)
    }

    /// Enables an account again for `by`; the tokens cut off when it was disabled stay
    /// refused. Enabling an enabled account changes nothing.
    pub async fn enable_user(
        &self,
        by: &Operator,
        id: UserId,
    ) -> Result<Controlled<UserAccount>, AdminError> {
        let (user, changed) = self
            .store
            .enable_user(id)
            .await?
            .ok_or(AdminError::UnknownUser)?;
        let action = format!("enabled user {} \"{}\"", user.id.0, user.username);
        Ok(Controlled::recorded(self, by, user, changed, action).await)
    }
}
