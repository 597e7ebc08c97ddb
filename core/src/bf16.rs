//! `bf16`: the upper half of an IEEE 754 binary32, the element type of paged attention's
//! inputs. Conversion from `f32` rounds to nearest, ties to even; NaN stays NaN (quiet).

use bytemuck::{Pod, Zeroable};

/// A bfloat16 value (its 16 raw bits).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct Bf16(pub u16);

impl Bf16 {
    /// Rounds `x` to the nearest bf16, ties to even.
    #[inline]
    pub fn from_f32(x: f32) -> Self {
        let bits = x.to_bits();
        // Add half an ulp of the result, plus one if the kept part is odd (ties to even).
        let rounded = bits.wrapping_add(0x7FFF + ((bits >> 16) & 1));
        // A NaN keeps its sign and becomes quiet whatever mantissa bits are dropped. A select,
        // not a branch, so that a loop of conversions vectorises.
        let kept = if x.is_nan() {
            bits | 0x0040_0000
        } else {
            rounded
        };
        Self((kept >> 16) as u16)
    }

    /// The exact `f32` value.
    #[inline]
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

impl From<f32> for Bf16 {
    fn from(x: f32) -> Self {
        Self::from_f32(x)
    }
}

impl From<Bf16> for f32 {
    fn from(x: Bf16) -> Self {
        x.to_f32()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_values_round_trip() {
        for x in [
            0.0f32,
            -0.0,
            1.0,
            -2.5,
            0.15625,
            65280.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ] {
            assert_eq!(Bf16::from_f32(x).to_f32().to_bits(), x.to_bits(), "{x}");
        }
    }

    #[test]
    fn rounds_to_nearest_ties_to_even() {
        // 1.0 = 0x3F80_0000; one bf16 ulp at 1.0 is 2^-7 (0x0001_0000 in f32 bits).
        let f = |bits: u32| f32::from_bits(bits);
        assert_eq!(Bf16::from_f32(f(0x3F80_7FFF)).0, 0x3F80, "below half: down");
        assert_eq!(Bf16::from_f32(f(0x3F80_8001)).0, 0x3F81, "above half: up");
        assert_eq!(
            Bf16::from_f32(f(0x3F80_8000)).0,
            0x3F80,
            "tie, even kept part: stays"
        );
        assert_eq!(
            Bf16::from_f32(f(0x3F81_8000)).0,
            0x3F82,
            "tie, odd kept part: up to even"
        );
        // The largest finite f32 rounds up to infinity, as round-to-nearest requires.
        assert_eq!(Bf16::from_f32(f32::MAX).to_f32(), f32::INFINITY);
    }

    #[test]
    fn nan_stays_nan() {
        assert!(Bf16::from_f32(f32::NAN).to_f32().is_nan());
        // A NaN whose payload lives only in the dropped bits must not become infinity, and
        // keeps its sign.
        for bits in [0x7F80_0001u32, 0xFF80_0001, 0x7FFF_FFFF, 0xFFC0_0000] {
            let b = Bf16::from_f32(f32::from_bits(bits));
            assert!(b.to_f32().is_nan(), "{bits:#010x}");
            assert_eq!(b.0 & 0x8000, (bits >> 16) as u16 & 0x8000, "{bits:#010x}");
        }
    }

    #[test]
    fn every_finite_value_goes_to_the_nearer_neighbour() {
        // Of the two bf16 values around x, the nearer in f64; on a tie, the even one.
        let nearest = |x: f32| -> u16 {
            let lo = (x.to_bits() >> 16) as u16;
            let hi = lo.wrapping_add(1);
            let v = |h: u16| f32::from_bits((h as u32) << 16) as f64;
            let (dl, dh) = ((x as f64 - v(lo)).abs(), (v(hi) - x as f64).abs());
            if dl < dh || (dl == dh && lo & 1 == 0) {
                lo
            } else {
                hi
            }
        };
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..100_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let x = f32::from_bits(seed as u32);
            // Beyond the largest finite bf16, the neighbour above is infinity (no f64 value).
            if !x.is_finite() || x.abs() >= f32::from_bits(0x7F7F_8000) {
                continue;
            }
            assert_eq!(Bf16::from_f32(x).0, nearest(x), "{:#010x}", x.to_bits());
        }
    }
}
