//! Plain N-API beneath the quota engine's edge (docs/architecture.md#the-edge-srcbinding).
//!
//! napi-rs's generated wrappers cost more than the scheduler's two calls themselves (~35 ns
//! for a call without arguments, ~120 ns with one, two N-API calls per string): those two
//! are plain N-API callbacks, and this crate holds what they need (their arguments, one-call
//! reads, their crossing object) and `ToJs`, the runtime half of `#[derive(FromCore)]`. It
//! knows nothing of the engine: its functions take N-API values and give back plain Rust
//! ones. Every other read of a JavaScript value uses napi-rs's safe API (`src/binding/`).

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod callback;
pub mod read;
pub mod to_js;
