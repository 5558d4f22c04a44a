//! Accounts' secrets: standing tokens (kept as their SHA-256), passwords (kept as PBKDF2
//! hashes) and the sign-in tokens a password buys at `POST /v1/login`.
//!
//! A password hash is the text `pbkdf2-sha256$<iterations>$<salt hex>$<hash hex>`: HMAC-SHA256,
//! 600,000 iterations (OWASP's figure for this function), a 16-byte random salt and a 32-byte
//! output. Verification takes the iteration count from the text, so the count can rise later
//! without invalidating stored hashes.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ring::rand::SecureRandom as _;

const SCHEME: &str = "pbkdf2-sha256";
const ITERATIONS: u32 = 600_000;
const SALT_BYTES: usize = 16;
const HASH_BYTES: usize = 32;

/// The shortest password an account may have.
pub const MIN_PASSWORD_CHARS: usize = 8;

/// How long a sign-in token lasts.
pub const LOGIN_TTL: Duration = Duration::from_secs(12 * 3600);

/// Failed sign-ins of one account, within [`LOCKOUT`], before it is refused without looking.
const MAX_FAILURES: u32 = 10;

/// The longest account name a sign-in is tried for.
pub const MAX_NAME_BYTES: usize = 256;
const LOCKOUT: Duration = Duration::from_secs(60);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn random(bytes: &mut [u8]) -> Result<(), String> {
    ring::rand::SystemRandom::new()
        .fill(bytes)
        .map_err(|_| "the system random source failed".to_string())
}

/// The hex SHA-256 of a token, as the store keeps it.
pub fn token_hash(token: &str) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref())
}

/// A new random token (32 bytes, hex).
pub fn new_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    random(&mut bytes)?;
    Ok(hex(&bytes))
}

/// Whether `password` may be set: long enough, one line.
pub fn check_password(password: &str) -> Result<(), String> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(format!(
            "a password needs at least {MIN_PASSWORD_CHARS} characters"
        ));
    }
    if password.contains(['\n', '\r']) {
        return Err("a password is one line".into());
    }
    Ok(())
}

/// The stored text of a new hash of `password`.
pub fn hash_password(password: &str) -> Result<String, String> {
    let mut salt = [0u8; SALT_BYTES];
    random(&mut salt)?;
    let mut out = [0u8; HASH_BYTES];
    let iterations = NonZeroU32::new(ITERATIONS).unwrap_or(NonZeroU32::MIN);
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        &salt,
        password.as_bytes(),
        &mut out,
    );
    Ok(format!(
        "{SCHEME}${ITERATIONS}${}${}",
        hex(&salt),
        hex(&out)
    ))
}

/// Whether `password` matches the stored `hash` (compared in constant time); a hash in an
/// unknown format matches nothing.
pub fn verify_password(password: &str, hash: &str) -> bool {
    let mut parts = hash.split('$');
    let (Some(SCHEME), Some(iterations), Some(salt), Some(expected), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    let (Some(iterations), Some(salt), Some(expected)) = (
        iterations.parse().ok().and_then(NonZeroU32::new),
        unhex(salt),
        unhex(expected),
    ) else {
        return false;
    };
    ring::pbkdf2::verify(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        &salt,
        password.as_bytes(),
        &expected,
    )
    .is_ok()
}

/// Work as long as one verification, for sign-ins of unknown accounts (so timing does not
/// tell which names exist).
pub fn verify_nothing(password: &str) {
    let _ = verify_password(
        password,
        "pbkdf2-sha256$600000$00000000000000000000000000000000$0000000000000000000000000000000000000000000000000000000000000000",
    );
}

/// Failed sign-ins per account name, kept by one gateway.
#[derive(Default)]
pub struct Throttle {
    failures: Mutex<HashMap<String, (u32, Instant)>>,
}

impl Throttle {
    /// Counts a sign-in attempt of `name` before its password is checked, so concurrent
    /// guesses cannot all pass the check while the hash runs; `false` when the name is
    /// locked out. A success clears the count ([`Throttle::succeeded`]).
    pub fn attempt(&self, name: &str) -> bool {
        if self.locked(name) {
            return false;
        }
        self.failed(name);
        true
    }

    /// Whether `name` is locked out now (too many recent failures).
    pub fn locked(&self, name: &str) -> bool {
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(name) {
            Some((n, since)) if since.elapsed() < LOCKOUT => *n >= MAX_FAILURES,
            Some(_) => {
                map.remove(name);
                false
            }
            None => false,
        }
    }

    pub fn failed(&self, name: &str) {
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 10_000 {
            map.retain(|_, (_, since)| since.elapsed() < LOCKOUT);
        }
        let entry = map.entry(name.to_string()).or_insert((0, Instant::now()));
        if entry.1.elapsed() >= LOCKOUT {
            *entry = (0, Instant::now());
        }
        entry.0 += 1;
    }

    pub fn succeeded(&self, name: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_verifies_against_its_own_hash_only() {
        let hash = hash_password("correct horse").unwrap();
        assert!(hash.starts_with("pbkdf2-sha256$600000$"), "{hash}");
        assert!(verify_password("correct horse", &hash));
        assert!(!verify_password("correct hors", &hash));
        // A second hash of the same password has its own salt.
        assert_ne!(hash, hash_password("correct horse").unwrap());
        // Malformed stored text matches nothing.
        for bad in [
            "",
            "pbkdf2-sha256$0$00$00",
            "pbkdf2-sha256$10$zz$00",
            "md5$1$00$00",
            &format!("{hash}$extra"),
        ] {
            assert!(!verify_password("correct horse", bad), "{bad}");
        }
        assert!(check_password("short").is_err());
        assert!(check_password("two\nlines!").is_err());
        assert!(check_password("long enough").is_ok());
    }

    #[test]
    fn repeated_failures_lock_an_account_out() {
        let t = Throttle::default();
        for _ in 0..MAX_FAILURES {
            assert!(t.attempt("ann"));
        }
        assert!(t.locked("ann"));
        assert!(!t.attempt("ann"));
        assert!(!t.locked("bob"));
        t.succeeded("ann");
        assert!(t.attempt("ann"));
    }
}
