//! `simpler-tests`: behaviour across crates, property tests against independent oracles, and
//! the benchmarks. The library part holds what the tests and benches share.
//!
//! ## Modules
//!
//! - [`fixtures`]: the reference's base tensor and descriptor builders used across suites.
//! - [`harness`]: memory for the core runtime structures and a single-threaded scheduler stand-in.
//! - [`workloads`]: the paged-attention and bgemm scenes' own task streams on a bare
//!   orchestrator.
//! - [`check`]: `assert_fails!`, the assertion on a specific error the suites share.
//! - [`random`]: seeded randomness (SplitMix64) and seeds from the environment, for the
//!   property suites.
//! - [`l3`]: what the level-3 (Worker) suites share: closing, task arguments, SUB callables.
//! - [`forked`]: a sequential runner for the suites that fork (the L3 Worker's).
//! - [`alloc_count`]: the counting global allocator the allocation-counting tests and benchmarks
//!   install.
//! - [`measure`]: timing and reporting helpers for the benchmarks, in the `bench <name> <figure>
//!   <value> <unit>` line format.
//! - [`peak`]: the machine's fp32 FMA peak and memcpy bandwidth, measured.
//!
//! `unsafe` appears only in `alloc_count` (a `GlobalAlloc` impl) and `peak` (calling the FMA
//! loops compiled for a vector unit detected at run time), each allowing it with its reason.

pub mod alloc_count;
pub mod check;
pub mod fixtures;
pub mod forked;
pub mod harness;
pub mod l3;
pub mod measure;
pub mod peak;
pub mod random;
pub mod workloads;
