//! The pure core: algorithms with no I/O, no `napi`, and time as a parameter.

pub mod admission;
pub mod burn_rate;
pub mod dimensions;
pub mod enforce;
pub mod fair_share;
pub mod iso8601;
pub mod plans;
pub mod saturation;
pub mod scheduler;
