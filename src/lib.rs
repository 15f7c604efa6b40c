#![deny(clippy::all)]
//! OmniRoute's quota-sharing engine: a pure core, storage drivers, and a thin napi edge.

pub mod core;
pub mod error;
pub mod store;

mod binding;
