//! Retry delays for failed jobs: exponential backoff with full jitter.
//!
//! Full jitter spreads retries of jobs that failed together, so a recovering
//! dependency is not hit by a synchronized wave of retries.

use rand::Rng;

/// Parameters of the backoff curve, in milliseconds.
pub struct Backoff {
    pub base_ms: u64,
    pub cap_ms: u64,
}

impl Backoff {
    /// Delay before retry number `attempt` (1-based): uniform in [0, min(cap, base * 2^attempt)].
    pub fn next_delay(&self, attempt: u32) -> u64 {
        let exp = self.base_ms.saturating_mul(1u64 << attempt.min(32));
        let ceiling = exp.min(self.cap_ms);
        rand::thread_rng().gen_range(0..=ceiling)
    }

    /// The largest delay any attempt can get: useful to size lease timeouts.
    pub fn worst_case(&self) -> u64 {
        self.cap_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_never_exceeds_cap() {
        let b = Backoff { base_ms: 100, cap_ms: 5_000 };
        for attempt in 1..40 {
            assert!(b.next_delay(attempt) <= 5_000);
        }
    }
}
