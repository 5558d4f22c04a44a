//! Accounts of the team store: a standing token per account (only its SHA-256 is kept), an
//! optional password hash (its text is the caller's format; the store never sees a password),
//! and sign-in tokens that expire.

use std::time::Duration;

use crate::{Store, StoreError, User, ttl_seconds};

/// One account as `dsh team user list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub admin: bool,
    /// A password is set (sign-in at `POST /v1/login` is possible).
    pub has_password: bool,
    /// Sign-in tokens not yet expired.
    pub live_sign_ins: i64,
    /// Sessions the account owns.
    pub sessions: i64,
}

impl Store {
    /// Adds account `name` whose token hashes to `token_sha256` (hex); `false` when the name
    /// is taken.
    pub async fn add_user(
        &self,
        name: &str,
        token_sha256: &str,
        admin: bool,
    ) -> Result<bool, StoreError> {
        self.add_user_with_password(name, token_sha256, admin, None)
            .await
    }

    /// [`Store::add_user`] with a password hash set in the same statement.
    pub async fn add_user_with_password(
        &self,
        name: &str,
        token_sha256: &str,
        admin: bool,
        password_hash: Option<&str>,
    ) -> Result<bool, StoreError> {
        let n = self
            .client
            .execute(
                "INSERT INTO dsh_users (name, token_sha256, admin, password_hash)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (name) DO NOTHING",
                &[&name, &token_sha256, &admin, &password_hash],
            )
            .await?;
        Ok(n == 1)
    }

    /// The account whose standing token, or whose unexpired sign-in token, hashes to
    /// `token_sha256`.
    pub async fn user_by_token(&self, token_sha256: &str) -> Result<Option<User>, StoreError> {
        let row = self
            .client
            .query_opt(
                "SELECT name, admin FROM dsh_users WHERE token_sha256 = $1
                 UNION ALL
                 SELECT u.name, u.admin FROM dsh_login_tokens t JOIN dsh_users u ON u.name = t.user_name
                  WHERE t.token_sha256 = $1 AND t.expires_at > now()
                 LIMIT 1",
                &[&token_sha256],
            )
            .await?;
        Ok(row.map(|r| User {
            name: r.get(0),
            admin: r.get(1),
        }))
    }

    /// The account named `name`.
    pub async fn user(&self, name: &str) -> Result<Option<User>, StoreError> {
        let row = self
            .client
            .query_opt(
                "SELECT name, admin FROM dsh_users WHERE name = $1",
                &[&name],
            )
            .await?;
        Ok(row.map(|r| User {
            name: r.get(0),
            admin: r.get(1),
        }))
    }

    /// Sets (or with `None` removes) the password hash of account `name` and ends every
    /// sign-in token the old password bought, in one transaction; `false` when there is no
    /// such account.
    pub async fn set_password_hash(
        &mut self,
        name: &str,
        hash: Option<&str>,
    ) -> Result<bool, StoreError> {
        let tx = self.client.transaction().await?;
        let n = tx
            .execute(
                "UPDATE dsh_users SET password_hash = $2 WHERE name = $1",
                &[&name, &hash],
            )
            .await?;
        tx.execute(
            "DELETE FROM dsh_login_tokens WHERE user_name = $1",
            &[&name],
        )
        .await?;
        tx.commit().await?;
        Ok(n == 1)
    }

    /// The password hash of account `name` (`None`: no such account, or it has no password).
    pub async fn password_hash(&self, name: &str) -> Result<Option<String>, StoreError> {
        let row = self
            .client
            .query_opt(
                "SELECT password_hash FROM dsh_users WHERE name = $1",
                &[&name],
            )
            .await?;
        Ok(row.and_then(|r| r.get(0)))
    }

    /// Records a sign-in token of account `name` (by its SHA-256) valid for `ttl` by the
    /// database clock; expired ones of every account are dropped on the way.
    pub async fn add_login_token(
        &self,
        name: &str,
        token_sha256: &str,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.client
            .execute(
                "DELETE FROM dsh_login_tokens WHERE expires_at <= now()",
                &[],
            )
            .await?;
        self.client
            .execute(
                "INSERT INTO dsh_login_tokens (token_sha256, user_name, expires_at)
                 VALUES ($1, $2, now() + make_interval(secs => $3))",
                &[&token_sha256, &name, &ttl_seconds(ttl)],
            )
            .await?;
        Ok(())
    }

    /// Ends a sign-in token early (signing out); `false` when it was not a live one.
    pub async fn revoke_login_token(&self, token_sha256: &str) -> Result<bool, StoreError> {
        let n = self
            .client
            .execute(
                "DELETE FROM dsh_login_tokens WHERE token_sha256 = $1",
                &[&token_sha256],
            )
            .await?;
        Ok(n == 1)
    }

    /// Every account, by name.
    pub async fn accounts(&self) -> Result<Vec<Account>, StoreError> {
        let rows = self
            .client
            .query(
                "SELECT u.name, u.admin, u.password_hash IS NOT NULL,
                        (SELECT count(*) FROM dsh_login_tokens t
                          WHERE t.user_name = u.name AND t.expires_at > now()),
                        (SELECT count(*) FROM dsh_sessions s WHERE s.owner_user = u.name)
                   FROM dsh_users u ORDER BY u.name",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| Account {
                name: r.get(0),
                admin: r.get(1),
                has_password: r.get(2),
                live_sign_ins: r.get(3),
                sessions: r.get(4),
            })
            .collect())
    }

    /// Replaces the standing token of account `name` with one hashing to `token_sha256`:
    /// the old token stops working at once. `false` when there is no such account.
    pub async fn set_token_hash(&self, name: &str, token_sha256: &str) -> Result<bool, StoreError> {
        let n = self
            .client
            .execute(
                "UPDATE dsh_users SET token_sha256 = $2 WHERE name = $1",
                &[&name, &token_sha256],
            )
            .await?;
        Ok(n == 1)
    }

    /// Removes account `name` with its sign-in tokens, in one transaction. Its sessions are
    /// kept, owned by no account from then on (only admins see them), so that nothing
    /// recorded is lost and a later account of the same name does not inherit them. The
    /// number of sessions it owned, or `None` when there is no such account.
    pub async fn remove_user(&mut self, name: &str) -> Result<Option<u64>, StoreError> {
        let tx = self.client.transaction().await?;
        let sessions = tx
            .execute(
                "UPDATE dsh_sessions SET owner_user = NULL WHERE owner_user = $1",
                &[&name],
            )
            .await?;
        tx.execute(
            "DELETE FROM dsh_login_tokens WHERE user_name = $1",
            &[&name],
        )
        .await?;
        let n = tx
            .execute("DELETE FROM dsh_users WHERE name = $1", &[&name])
            .await?;
        if n != 1 {
            // Nothing to remove: leave every row as it was.
            tx.rollback().await?;
            return Ok(None);
        }
        tx.commit().await?;
        Ok(Some(sessions))
    }
}
