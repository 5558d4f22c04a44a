//! Accounts of the team store: a standing token per account (only its SHA-256 is kept), an
//! optional password hash (its text is the caller's format; the store never sees a password),
//! and sign-in tokens that expire.

use std::time::Duration;

use crate::{Store, StoreError, User, ttl_seconds};

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
}
