//! `simpler-tests`: behaviour across crates, property tests against independent oracles, and
//! the benchmarks. The library part holds what the tests and benches share.
//!
//! Modules:
// `unsafe` only in `alloc_count` (a `GlobalAlloc` impl), which allows it with its reason.

// The counting global allocator the allocation-counting tests and benchmarks install.
pub mod alloc_count;
// `assert_fails!`, the assertion on a specific error the suites share.
pub mod check;
// Fixtures: the reference's base tensor and descriptor builders used across suites.
pub mod fixtures;
// A sequential runner for the suites that fork (the L3 Worker's).
pub mod forked;
// Memory for the core runtime structures and a single-threaded scheduler stand-in.
pub mod harness;
// What the level-3 (Worker) suites share: closing, task arguments, SUB callables.
pub mod l3;
// Timing and reporting helpers for the benchmarks, in the `bench <name> <figure> <value> <unit>`
// line format.
pub mod measure;
// Seeded randomness (SplitMix64) and seeds from the environment, for the property suites.
pub mod random;
// The paged-attention and bgemm scenes' own task streams on a bare orchestrator.
pub mod workloads;
