//! The only place with `#[napi]`: converts JS values to core types and back.
