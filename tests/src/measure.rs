//! Benchmark plumbing: repeated samples, median and minimum, and the one output format.
//!
//! Every figure is printed as `bench <name> <figure> <value> <unit>`, one per line, so a script
//! can read it. Durations come from repeated samples; quote the median and the minimum, never
//! one run. Arms that are compared run interleaved in one process (A, B, A, B, ...).

use std::time::Instant;

/// Median and minimum of a set of samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// The median sample.
    pub median: f64,
    /// The smallest sample.
    pub min: f64,
}

/// Summarizes `samples` (which it sorts). `None` when empty.
pub fn summarize(samples: &mut [f64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_by(f64::total_cmp);
    let mid = samples.len() / 2;
    let median = if samples.len() % 2 == 1 {
        samples[mid]
    } else {
        (samples[mid - 1] + samples[mid]) / 2.0
    };
    Some(Summary {
        median,
        min: samples[0],
    })
}

/// Times `iters` calls of `f`, each handling `items` items, and returns nanoseconds per item.
pub fn ns_per_item(iters: u64, items: u64, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    start.elapsed().as_nanos() as f64 / (iters * items.max(1)) as f64
}

/// Prints one figure line.
pub fn report(name: &str, figure: &str, value: f64, unit: &str) {
    println!("bench {name} {figure} {value:.2} {unit}");
}

/// Prints the median and minimum of `samples` as `<figure>_median` and `<figure>_min`.
pub fn report_summary(name: &str, figure: &str, samples: &mut [f64], unit: &str) {
    if let Some(s) = summarize(samples) {
        report(name, &format!("{figure}_median"), s.median, unit);
        report(name, &format!("{figure}_min"), s.min, unit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_min_of_odd_and_even_sets() {
        let mut odd = [5.0, 1.0, 3.0];
        assert_eq!(
            summarize(&mut odd),
            Some(Summary {
                median: 3.0,
                min: 1.0
            })
        );
        let mut even = [4.0, 2.0, 8.0, 6.0];
        assert_eq!(
            summarize(&mut even),
            Some(Summary {
                median: 5.0,
                min: 2.0
            })
        );
        assert_eq!(summarize(&mut []), None);
    }
}
