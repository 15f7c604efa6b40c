//! The only place with `#[napi]`: converts JavaScript values to core types (rejecting bad
//! input with an error naming the field) and core results back to plain JS values.

mod account_buckets;
mod admission;
mod args;
mod burn_rate;
mod convert;
mod db;
mod dimensions;
mod errors;
mod fair_share;
mod hot_path;
mod inflight;
mod inspect;
mod log_queue;
mod plans;
mod promise;
mod quota_share;
mod raw_call;
mod redis_hot_path;
mod redis_store;
mod scheduler_state;
mod store;
mod test_hooks;
mod types;
