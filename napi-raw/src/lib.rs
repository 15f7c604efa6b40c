//! Plain N-API beneath the quota engine's edge (docs/architecture.md#the-edge-srcbinding):
//! `ToJs`, the runtime half of `#[derive(FromCore)]`, and one-call reads of N-API values
//! (`read`). It knows nothing of the engine: its functions take N-API values and give back
//! plain Rust ones. Every other read of a JavaScript value uses napi-rs's safe API
//! (`src/binding/`).

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod read;
pub mod to_js;
