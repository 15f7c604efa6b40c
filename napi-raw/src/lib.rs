//! Plain N-API beneath the quota engine's edge (docs/architecture.md#the-edge-srcbinding).
//!
//! napi-rs's generated wrappers cost more than some of the engine's calls: ~35 ns for a
//! call without arguments, ~120 ns with one, two N-API calls per string, a new JavaScript
//! string for every property name. This crate does those few things with fewer N-API calls,
//! and nothing napi-rs lacks an API for. It
//! knows nothing of the engine: its functions take N-API values and give back plain Rust
//! ones. Its users are the edge (`src/binding/`) and the test edge (`src/test_hooks.rs`).

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod callback;
pub mod names;
pub mod read;
pub mod to_js;
