//! The combo scheduler of docs/contract.md §10 — the internal `quota-share` routing strategy that
//! chooses among the upstream connections of an auto-minted pool combo.
//!
//! One concept per file: [`inflight`] leases, [`account_buckets`] (saturation per usage
//! window), [`drr`] (deficit round robin per combo) and [`select`] (the selection that
//! combines them). Time is always a parameter; the state is plain data, and the
//! process-wide instance lives at the edge.

pub mod account_buckets;
pub mod drr;
pub mod inflight;
pub mod select;

/// The strategy's name in a combo's configuration.
pub const QUOTA_SHARE_STRATEGY: &str = "quota-share";
