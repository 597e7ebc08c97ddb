//! GM's backing store commits memory only as runs touch it: reserving the arena takes (almost)
//! no page faults, and writing part of it faults in about that part. Its own test binary, so
//! no other test's threads fault pages inside the counted spans.

use simpler_core::gm::Gm;
use simpler_sim::gm::GmWords;
use simpler_tests::measure::process_minor_faults;

const PAGE: u64 = 4096;

#[test]
fn gm_pages_are_committed_on_first_touch_not_at_reservation() {
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
