//! The pure core: algorithms with no I/O, no `napi`, and time as a parameter.

pub mod dimensions;
pub mod sliding_window;
