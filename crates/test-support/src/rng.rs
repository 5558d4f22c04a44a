//! A small deterministic generator for tests that draw at random (xorshift64), and the seed
//! such a test starts from, so that a failing run can be replayed.

/// xorshift64: the same seed gives the same sequence on every machine.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0, which xorshift cannot leave, is taken as 1).
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 for `n` = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// The seed in environment variable `var`, else one from the clock (never 0); the caller
/// prints it so a failing run can be replayed.
pub fn seed_from(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_sequence_and_zero_is_not_stuck() {
        let a: Vec<u64> = (0..4)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..4)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        let mut zero = Rng::new(0);
        assert_ne!(zero.next_u64(), 0);
        assert!((0..100).all(|_| zero.below(3) < 3));
        assert_eq!(zero.below(0), 0);
    }
}
