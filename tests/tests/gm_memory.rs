//! GM's backing store commits memory only as runs touch it: reserving the arena takes (almost)
//! no page faults, and writing part of it faults in about that part. Its own test binary, so
//! no other test's threads fault pages inside the counted spans; its tests take turns
//! ([`ALONE`]) for the same reason.

use simpler_core::gm::Gm;
use simpler_sim::gm::GmWords;
use simpler_sim::pages::{Pages, HUGE_PAGE};
use simpler_tests::measure::{process_minor_faults, rss_bytes};

const PAGE: u64 = 4096;

/// Held by each test for its whole body: the counts are the process's.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn gm_pages_are_committed_on_first_touch_not_at_reservation() {
    let _alone = alone();
    let bytes: u64 = 256 << 20;
    let before = process_minor_faults();
    let words = GmWords::zeroed((bytes / 8) as usize);
    let reserved = process_minor_faults() - before;
    // Touching the arena would take one fault per page: 65,536.
    assert!(
        reserved < 256,
        "reserving {bytes} bytes of GM took {reserved} minor faults"
    );
    let gm = words.arena(0x1000);
    let touched: u64 = 4 << 20;
    let before = process_minor_faults();
    gm.write(0x1000 + (64 << 20), &vec![1u8; touched as usize])
        .unwrap();
    let written = process_minor_faults() - before;
    // The pages written, and few others (the source buffer's own pages come from the same
    // allocator, so count up to twice the span).
    assert!(
        written >= touched / PAGE / 2 && written <= 2 * touched / PAGE + 256,
        "writing {touched} bytes took {written} minor faults"
    );
    // Untouched GM still reads as zeros.
    let mut out = vec![9u8; 4096];
    gm.read(0x1000 + (200 << 20), &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0));
}

/// On huge pages (the device's default) GM is still committed only as touched: at most one
/// huge page more at each end of what was written, whether or not the kernel grants huge
/// pages.
#[test]
fn huge_page_gm_commits_what_is_touched_at_huge_page_grain() {
    let _alone = alone();
    let bytes: u64 = 256 << 20;
    // The source first, so its pages are resident before the counted span.
    let touched: usize = 8 << 20;
    let src = vec![1u8; touched];
    let before = rss_bytes();
    let words = GmWords::zeroed_on((bytes / 8) as usize, Pages::Huge);
    let reserved = rss_bytes().saturating_sub(before);
    assert!(
        reserved < HUGE_PAGE as u64,
        "reserving {bytes} bytes of huge-page GM made {reserved} bytes resident"
    );
    let gm = words.arena(0x1000);
    let before = rss_bytes();
    gm.write(0x1000 + (64 << 20) + 4096, &src).unwrap();
    let grew = rss_bytes().saturating_sub(before);
    assert!(
        grew >= touched as u64 / 2 && grew <= (touched + 2 * HUGE_PAGE) as u64 + (1 << 20),
        "writing {touched} bytes of huge-page GM made {grew} bytes resident"
    );
    let mut out = vec![9u8; 4096];
    gm.read(0x1000 + (200 << 20), &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0));
    let mut back = vec![0u8; 4096];
    gm.read(0x1000 + (64 << 20) + 4096, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 1));
}
