#![deny(clippy::all)]
#![deny(clippy::undocumented_unsafe_blocks)]
//! OmniRoute's quota-sharing engine: a pure core, storage drivers, and a thin napi edge.

pub mod core;
pub mod engine;
pub mod error;
pub mod store;

// The napi edge is linked into the addon only; unit tests exercise the core and stores.
#[cfg(not(test))]
mod binding;
// The test edge: hooks for the tests and benches, never in a release build.
#[cfg(all(feature = "test-hooks", not(test)))]
mod test_hooks;
