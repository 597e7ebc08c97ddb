//! Benchmark plumbing: repeated samples, median and minimum, and the one output format.
//!
//! Every figure is printed as `bench <name> <figure> <value> <unit>`, one per line, so a script
//! can read it. Durations come from repeated samples; quote the median and the minimum, never
//! one run. Arms that are compared run interleaved in one process (A, B, A, B, ...).
//!
//! `SIMPLER_BENCH_SMOKE=1` makes every benchmark a smoke run (`.ci/run` runs each once so): one
//! sample of a small workload, every golden and count check still made; its figures are not
//! measurements.

use std::io::Read;
use std::time::Instant;

/// Whether this is a smoke run (`SIMPLER_BENCH_SMOKE` set to anything but `0`).
pub fn smoke() -> bool {
    std::env::var_os("SIMPLER_BENCH_SMOKE").is_some_and(|v| v != "0")
}

/// `full`, or `small` in a smoke run.
pub fn sized<T>(full: T, small: T) -> T {
    if smoke() {
        small
    } else {
        full
    }
}

/// Minor page faults every thread of this process has taken (`/proc/self/stat`, the figure
/// `getrusage(RUSAGE_SELF)` gives), 0 where unreadable. Reads into a stack buffer, so it
/// allocates nothing inside a counted span.
pub fn process_minor_faults() -> u64 {
    let mut buf = [0u8; 1024];
    let n = std::fs::File::open("/proc/self/stat")
        .and_then(|mut f| f.read(&mut buf))
        .unwrap_or(0);
    // Fields after the parenthesised command: state is field 3, minflt field 10.
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|stat| stat.rsplit_once(')'))
        .and_then(|(_, rest)| rest.split_whitespace().nth(7))
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

/// The process's peak resident memory in bytes (`VmHWM` in `/proc/self/status`), 0 where
/// unreadable: a high-water mark, so it only grows over a process's life.
pub fn peak_rss_bytes() -> u64 {
    status_kb("VmHWM:").map_or(0, |kb| kb * 1024)
}

/// Starts the process's peak resident memory (`VmHWM`) again from its resident memory now,
/// by writing `5` to `/proc/self/clear_refs` (Linux 4.0 and later); false where that file
/// cannot be written, and the peak then keeps growing over the process's life.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The process's resident memory in bytes now (`VmRSS` in `/proc/self/status`), 0 where
/// unreadable.
pub fn rss_bytes() -> u64 {
    status_kb("VmRSS:").map_or(0, |kb| kb * 1024)
}

/// The kB figure of `field` in `/proc/self/status`.
fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
}

/// The `/proc/self/task/<tid>` directories of the live threads of this process whose name
/// starts with `prefix` (a name is cut to 15 bytes there); none where unreadable.
fn named_threads(prefix: &str) -> impl Iterator<Item = std::path::PathBuf> + '_ {
    std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .map(|task| task.path())
        .filter(move |path| {
            std::fs::read_to_string(path.join("comm"))
                .is_ok_and(|comm| comm.trim_end().starts_with(prefix))
        })
}

/// Minor page faults the live threads of this process whose name starts with `prefix` have
/// taken (`/proc/self/task/*/stat`), 0 where unreadable. Subtracted from
/// [`process_minor_faults`], it leaves out threads that work beside a measured span rather
/// than for it (threads that ended are in neither count).
pub fn threads_minor_faults(prefix: &str) -> u64 {
    named_threads(prefix)
        .map(|path| {
            std::fs::read_to_string(path.join("stat"))
                .ok()
                .as_deref()
                .and_then(|stat| stat.rsplit_once(')'))
                .and_then(|(_, rest)| rest.split_whitespace().nth(7))
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// CPU time, in nanoseconds, the live threads of this process whose name starts with
/// `prefix` have run (the first field of `/proc/self/task/*/schedstat`); `None` when no such
/// thread's figure could be read (no thread of that name, or a kernel without the file).
pub fn threads_cpu_ns(prefix: &str) -> Option<u64> {
    named_threads(prefix)
        .filter_map(|path| {
            std::fs::read_to_string(path.join("schedstat"))
                .ok()?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .reduce(|a, b| a + b)
}

/// Median and minimum of a set of samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// The middle sample (the mean of the two middle ones for an even count), in the
    /// samples' unit.
    pub median: f64,
    /// The smallest sample, in the samples' unit: the least disturbed run.
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

/// Prints one figure line, `bench <name> <figure> <value> <unit>`, the value to 2 decimals.
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
    fn a_named_threads_cpu_time_is_counted_and_an_unknown_name_has_none() {
        // A thread that spins on the CPU for 20 ms of wall time has run for some of it (all
        // of it on an idle machine) and for no longer than the wall time it was alive.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let wall = std::time::Instant::now();
        let t = std::thread::Builder::new()
            .name("measure-spin".into())
            .spawn(move || {
                let start = std::time::Instant::now();
                while start.elapsed() < std::time::Duration::from_millis(20) {
                    std::hint::spin_loop();
                }
                tx.send(()).unwrap();
                // Alive until read, so its figure is there to read.
                let _ = done_rx.recv();
            })
            .unwrap();
        rx.recv().unwrap();
        let ns = threads_cpu_ns("measure-spin");
        let alive = wall.elapsed().as_nanos() as u64;
        done_tx.send(()).unwrap();
        t.join().unwrap();
        if std::path::Path::new("/proc/self/task").exists()
            && std::fs::read_dir("/proc/self/task")
                .ok()
                .and_then(|mut d| d.next())
                .and_then(|e| e.ok())
                .is_some_and(|e| e.path().join("schedstat").exists())
        {
            let ns = ns.expect("the spinning thread's CPU time");
            assert!(ns > 0 && ns <= alive, "{ns} ns of CPU in {alive} ns alive");
        }
        assert_eq!(threads_cpu_ns("no-such-thread"), None);
    }

    #[test]
    fn process_faults_count_another_threads_first_touches() {
        const PAGES: usize = 256;
        let before = process_minor_faults();
        std::thread::spawn(|| {
            let mut v = vec![0u8; PAGES * 4096];
            for page in v.chunks_mut(4096) {
                page[0] = 1;
            }
            std::hint::black_box(&v);
        })
        .join()
        .unwrap();
        let after = process_minor_faults();
        assert!(
            after - before >= PAGES as u64 / 2,
            "{before} -> {after} over {PAGES} fresh pages touched by another thread"
        );
    }

    #[test]
    fn thread_faults_count_only_the_named_threads() {
        const PAGES: usize = 256;
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let toucher = std::thread::Builder::new()
            .name("measure-toucher".into())
            .spawn(move || {
                let mut v = vec![0u8; PAGES * 4096];
                for page in v.chunks_mut(4096) {
                    page[0] = 1;
                }
                std::hint::black_box(&v);
                tx.send(()).unwrap();
                // Stay alive, so the thread is still listed when counted.
                let _ = done_rx.recv();
            })
            .unwrap();
        rx.recv().unwrap();
        assert!(threads_minor_faults("measure-touch") >= PAGES as u64 / 2);
        assert_eq!(threads_minor_faults("no-such-thread-"), 0);
        done_tx.send(()).unwrap();
        toucher.join().unwrap();
    }

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
