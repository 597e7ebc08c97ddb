//! Seeded randomness for the property and stress suites (`dep_oracle`, `sched_stress`): the
//! SplitMix64 generator, and reading a seed or a count from the environment so a failure can be
//! replayed.
//!
//! Both suites pin their default seeds, and `dep_oracle` pins counts that follow from the exact
//! stream, so the reductions here keep each suite's own arithmetic: `below` (modulo) is
//! `dep_oracle`'s, `below_scaled` (multiply-shift) `sched_stress`'s.

/// SplitMix64 (Steele, Lea and Flood, 2014): a 64-bit state stepped by the golden-ratio
/// increment and mixed; small, fast, and good enough for a test's choices. The state is
/// public so a suite can seed it directly.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` by modulo (`n = 0` counts as 1); biased by under `n / 2^64`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A value in `0..n` for `n <= 2^32`, from the high 32 bits by multiply-shift: no division,
    /// biased by under `n / 2^32`.
    pub fn below_scaled(&mut self, n: u64) -> u64 {
        ((self.next_u64() >> 32) * n) >> 32
    }

    /// A value in `lo..=hi` (by [`Self::below`]).
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.below((hi - lo) as u64 + 1) as u32
    }

    /// True with probability `num / den` (by [`Self::below`]).
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// One of `items`, uniformly (by [`Self::below`]); `items` must not be empty.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// Environment variable `name` as a u64, decimal or `0x` hexadecimal, surrounding whitespace
/// ignored; `None` when unset or unparsable.
pub fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}
