//! Every setting the engine reads from the environment, parsed and validated here and
//! nowhere else (docs/contract.md §11). Values are read when they are used, not at load
//! (the host's tests change `process.env` between cases, and Node's main thread writes
//! `process.env` through to the process environment, which every thread reads), and a bad
//! value falls back to its default with one warning per distinct bad value.

use std::collections::HashSet;
use std::sync::Mutex;

/// A numeric setting: its variable, default and valid range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NumberSpec {
  pub name: &'static str,
  pub default: f64,
  pub min: f64,
  pub max: f64,
  /// An out-of-range number is clamped into the range instead of replaced by the default.
  pub clamp: bool,
}

/// `name`, its default, its range and whether out-of-range values are clamped.
const fn spec(name: &'static str, default: f64, min: f64, max: f64, clamp: bool) -> NumberSpec {
  NumberSpec {
    name,
    default,
    min,
    max,
    clamp,
  }
}

/// `QUOTA_SATURATION_THRESHOLD`: at or above it a pool is in strict mode.
pub const SATURATION_THRESHOLD: NumberSpec =
  spec("QUOTA_SATURATION_THRESHOLD", 0.5, 0.0, 1.0, false);
/// `QUOTA_SOFT_DEPRIORITIZE_FACTOR`: the soft-policy score multiplier (clamped into 0..1).
pub const SOFT_DEPRIORITIZE_FACTOR: NumberSpec =
  spec("QUOTA_SOFT_DEPRIORITIZE_FACTOR", 0.7, 0.0, 1.0, true);
/// `QUOTA_CONSUMPTION_RETENTION_DAYS`: counter rows older than this are swept.
pub const RETENTION_DAYS: NumberSpec = spec(
  "QUOTA_CONSUMPTION_RETENTION_DAYS",
  14.0,
  0.0,
  36_500.0,
  false,
);
/// `QUOTA_RECORD_FLUSH_MS` (beyond the contract): how old buffered records may get before
/// a recording call commits them itself (SQLite), or before their flush (Redis,
/// docs/redis.md#write-behind); 0 commits every record in its own call.
pub const RECORD_FLUSH_MS: NumberSpec = spec("QUOTA_RECORD_FLUSH_MS", 10.0, 0.0, 60_000.0, false);
/// `QUOTA_STORE_REDIS_TIMEOUT_MS`: the bound on every Redis operation.
pub const REDIS_TIMEOUT_MS: NumberSpec =
  spec("QUOTA_STORE_REDIS_TIMEOUT_MS", 1000.0, 1.0, 60_000.0, false);
/// `QUOTA_STORE_REDIS_THREADS`: worker threads of the addon's I/O runtime.
pub const REDIS_THREADS: NumberSpec = spec("QUOTA_STORE_REDIS_THREADS", 1.0, 1.0, 16.0, false);
/// `QUOTA_STORE_REDIS_VIEW_MS` (beyond the contract): the maximum staleness of the Redis
/// counter view, 0 for none (docs/redis.md#the-counter-view says why 100 ms).
pub const REDIS_VIEW_MS: NumberSpec =
  spec("QUOTA_STORE_REDIS_VIEW_MS", 100.0, 0.0, 10_000.0, false);

/// `QUOTA_SCHEDULER_MAX_IDS`: how many distinct names (connection ids, execution keys,
/// combo names) the combo scheduler keeps state for; past it the least recently used
/// names are forgotten with all their state (docs/scheduler.md, "A bound on names").
pub const SCHEDULER_MAX_IDS: NumberSpec = spec(
  "QUOTA_SCHEDULER_MAX_IDS",
  100_000.0,
  1_000.0,
  100_000_000.0,
  true,
);

/// `QUOTA_SATURATION_FETCH_TIMEOUT_MS`: how long a request waits for a host saturation
/// fetcher (docs/contract.md §8); past it the fallback is used and one warning logged.
pub const SATURATION_FETCH_TIMEOUT_MS: NumberSpec = spec(
  "QUOTA_SATURATION_FETCH_TIMEOUT_MS",
  250.0,
  1.0,
  60_000.0,
  false,
);

/// Every numeric setting, in the order `quota-engine doctor` lists them.
pub const NUMBERS: [NumberSpec; 9] = [
  SATURATION_THRESHOLD,
  SOFT_DEPRIORITIZE_FACTOR,
  RETENTION_DAYS,
  RECORD_FLUSH_MS,
  REDIS_TIMEOUT_MS,
  REDIS_THREADS,
  REDIS_VIEW_MS,
  SCHEDULER_MAX_IDS,
  SATURATION_FETCH_TIMEOUT_MS,
];

/// `QUOTA_STORE_DRIVER`, `QUOTA_STORE_REDIS_URL`, `QUOTA_STORE_REDIS_CLUSTER`,
/// `QUOTA_ADMISSION`, `DATA_DIR`: the settings that are not numbers.
pub const STORE_DRIVER: &str = "QUOTA_STORE_DRIVER";
pub const STORE_REDIS_URL: &str = "QUOTA_STORE_REDIS_URL";
pub const STORE_REDIS_CLUSTER: &str = "QUOTA_STORE_REDIS_CLUSTER";
pub const ADMISSION: &str = "QUOTA_ADMISSION";
pub const DATA_DIR: &str = "DATA_DIR";
/// `QUOTA_STORE_REDIS_CA_FILE`: a PEM bundle of CAs a `rediss` URL's server may chain to,
/// added to the system roots (docs/redis.md#tls).
pub const STORE_REDIS_CA_FILE: &str = "QUOTA_STORE_REDIS_CA_FILE";
/// `NODE_EXTRA_CA_CERTS`: Node's own extra CAs, trusted the same way.
pub const NODE_EXTRA_CA_CERTS: &str = "NODE_EXTRA_CA_CERTS";
/// `QUOTA_STORE_REDIS_TLS_CERT_FILE` / `QUOTA_STORE_REDIS_TLS_KEY_FILE`: a client
/// certificate chain and its key (PEM) for servers that ask for one; both or neither.
pub const STORE_REDIS_TLS_CERT_FILE: &str = "QUOTA_STORE_REDIS_TLS_CERT_FILE";
pub const STORE_REDIS_TLS_KEY_FILE: &str = "QUOTA_STORE_REDIS_TLS_KEY_FILE";
/// `QUOTA_STORE_REDIS_POOL_TOTALS`: `exact` (the default) or `aggregate`
/// (docs/redis.md#pool-totals).
pub const STORE_REDIS_POOL_TOTALS: &str = "QUOTA_STORE_REDIS_POOL_TOTALS";

/// What a raw value of a numeric setting means.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluated {
  /// The value in effect.
  pub value: f64,
  /// Unset, empty, or a number within the range.
  pub valid: bool,
  /// An out-of-range number was clamped (rather than replaced by the default).
  pub clamped: bool,
}

/// The value a raw setting stands for (see [`Evaluated`]).
pub fn evaluate(spec: &NumberSpec, raw: Option<&str>) -> Evaluated {
  let evaluated = |value, valid, clamped| Evaluated {
    value,
    valid,
    clamped,
  };
  let trimmed = raw.map(str::trim).unwrap_or_default();
  if trimmed.is_empty() {
    return evaluated(spec.default, true, false);
  }
  match trimmed.parse::<f64>() {
    Ok(v) if v.is_finite() && v >= spec.min && v <= spec.max => evaluated(v, true, false),
    Ok(v) if spec.clamp && v.is_finite() => evaluated(v.clamp(spec.min, spec.max), false, true),
    _ => evaluated(spec.default, false, false),
  }
}

/// `QUOTA_ADMISSION` (beyond the contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionMode {
  /// The contract's peek, then record.
  Default,
  /// Enforce reserves the estimated cost atomically; record settles it.
  Reserve,
}

/// The admission mode of a raw value, and whether the value was valid.
pub fn admission_of(raw: Option<&str>) -> (AdmissionMode, bool) {
  match raw.map(str::trim).unwrap_or_default() {
    "" | "default" => (AdmissionMode::Default, true),
    "reserve" => (AdmissionMode::Reserve, true),
    _ => (AdmissionMode::Default, false),
  }
}

/// `QUOTA_STORE_REDIS_POOL_TOTALS`, and whether the raw value was valid.
pub fn pool_totals_of(raw: Option<&str>) -> (crate::store::redis::PoolTotals, bool) {
  use crate::store::redis::PoolTotals;
  match raw
    .map(|v| v.trim().to_ascii_lowercase())
    .unwrap_or_default()
    .as_str()
  {
    "" | "exact" => (PoolTotals::Exact, true),
    "aggregate" => (PoolTotals::Aggregate, true),
    _ => (PoolTotals::Exact, false),
  }
}

/// `QUOTA_STORE_REDIS_CLUSTER`: `1`, `true` or `yes` (any case).
pub fn cluster_switch(raw: Option<&str>) -> bool {
  raw.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// One numeric setting as the environment has it, for `quota-engine doctor`.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingReport {
  pub name: &'static str,
  /// As the environment has it.
  pub raw: Option<String>,
  /// In effect (see [`Evaluated`]).
  pub value: f64,
  pub default: f64,
  pub min: f64,
  pub max: f64,
  pub valid: bool,
  pub clamped: bool,
}

/// The environment the engine reads: the process's, or a fixed map in tests.
pub type EnvReader = fn(&str) -> Option<String>;

/// The process environment; an empty value counts as unset.
pub fn process_env(name: &str) -> Option<String> {
  // `into_string` keeps the allocation `var_os` made (read three times a request).
  std::env::var_os(name).filter(|v| !v.is_empty()).map(|v| {
    v.into_string()
      .unwrap_or_else(|v| v.to_string_lossy().into_owned())
  })
}

/// The process's configuration: reads the environment on use and warns once per bad value.
pub struct Config {
  env: EnvReader,
  warned: Mutex<HashSet<String>>,
}

impl Default for Config {
  fn default() -> Self {
    Self::new(process_env)
  }
}

impl Config {
  /// A configuration over `env` (the process environment in production).
  pub fn new(env: EnvReader) -> Self {
    Config {
      env,
      warned: Mutex::new(HashSet::new()),
    }
  }

  /// The raw value of `name` (empty counts as unset).
  pub fn raw(&self, name: &str) -> Option<String> {
    (self.env)(name)
  }

  /// The worker threads of the addon's tokio runtime: [`REDIS_THREADS`] as a whole number
  /// in its range, else 1 — the Redis driver's work is I/O on one multiplexed connection,
  /// and each extra worker is one more thread handing tasks across cores.
  pub fn runtime_threads(&self) -> usize {
    let (min, max) = (REDIS_THREADS.min as usize, REDIS_THREADS.max as usize);
    self
      .raw(REDIS_THREADS.name)
      .and_then(|v| v.trim().parse::<usize>().ok())
      .filter(|n| (min..=max).contains(n))
      .unwrap_or(1)
  }

  /// `Some(message)` the first time `name=raw` is seen bad, `None` after.
  fn first_warning(
    &self,
    name: &str,
    raw: &str,
    message: impl FnOnce() -> String,
  ) -> Option<String> {
    let key = format!("{name}={raw}");
    let mut warned = super::relock(&self.warned);
    if warned.len() > 1000 {
      warned.clear();
    }
    warned.insert(key).then(message)
  }

  /// The value of a numeric setting, and the warning to log when its raw value is bad and
  /// was not warned about before.
  pub fn number(&self, spec: &NumberSpec) -> (f64, Option<String>) {
    let raw = self.raw(spec.name);
    let evaluated = evaluate(spec, raw.as_deref());
    if evaluated.valid || evaluated.clamped {
      return (evaluated.value, None);
    }
    let raw = raw.unwrap_or_default();
    let warning = self.first_warning(spec.name, &raw, || {
      format!(
        "{}={:?} is not a number in {}..{}; using {}",
        spec.name, raw, spec.min, spec.max, spec.default
      )
    });
    (evaluated.value, warning)
  }

  /// `QUOTA_ADMISSION`, and the warning for a bad value (once).
  pub fn admission(&self) -> (AdmissionMode, Option<String>) {
    self.one_of(
      ADMISSION,
      admission_of,
      "\"default\" or \"reserve\"; using default",
    )
  }

  /// `QUOTA_STORE_REDIS_POOL_TOTALS`, and the warning for a bad value (once).
  pub fn pool_totals(&self) -> (crate::store::redis::PoolTotals, Option<String>) {
    let expected = "\"exact\" or \"aggregate\"; using exact";
    self.one_of(STORE_REDIS_POOL_TOTALS, pool_totals_of, expected)
  }

  /// A setting of a few words, read by `of`, and the warning for a bad value (once).
  fn one_of<T>(
    &self,
    name: &str,
    of: fn(Option<&str>) -> (T, bool),
    expected: &str,
  ) -> (T, Option<String>) {
    let raw = self.raw(name);
    let (value, valid) = of(raw.as_deref());
    if valid {
      return (value, None);
    }
    let raw = raw.unwrap_or_default();
    let warning = self.first_warning(name, &raw, || format!("{name}={raw:?} is not {expected}"));
    (value, warning)
  }

  /// The TLS files of a `rediss` URL: the extra CAs (`NODE_EXTRA_CA_CERTS`, then
  /// `QUOTA_STORE_REDIS_CA_FILE`) and the client certificate, with the warning for a
  /// certificate without its key or a key without its certificate (once; neither is used).
  pub fn redis_tls_files(&self) -> (crate::store::redis::tls::TlsFiles, Option<String>) {
    let ca = [NODE_EXTRA_CA_CERTS, STORE_REDIS_CA_FILE]
      .into_iter()
      .filter_map(|name| self.raw(name).map(|path| (name, path)))
      .collect();
    let cert = self.raw(STORE_REDIS_TLS_CERT_FILE);
    let key = self.raw(STORE_REDIS_TLS_KEY_FILE);
    let (client, warning) = match (cert, key) {
      (Some(cert), Some(key)) => (
        Some((
          (STORE_REDIS_TLS_CERT_FILE, cert),
          (STORE_REDIS_TLS_KEY_FILE, key),
        )),
        None,
      ),
      (None, None) => (None, None),
      (cert, _) => {
        let (set, unset) = match cert {
          Some(_) => (STORE_REDIS_TLS_CERT_FILE, STORE_REDIS_TLS_KEY_FILE),
          None => (STORE_REDIS_TLS_KEY_FILE, STORE_REDIS_TLS_CERT_FILE),
        };
        let warning = self.first_warning(set, "", || {
          format!("{set} is set without {unset}; no client certificate is presented")
        });
        (None, warning)
      }
    };
    (crate::store::redis::tls::TlsFiles { ca, client }, warning)
  }

  /// Every numeric setting as the environment has it, without warning.
  pub fn describe(&self) -> Vec<SettingReport> {
    NUMBERS
      .iter()
      .map(|spec| {
        let raw = self.raw(spec.name);
        let evaluated = evaluate(spec, raw.as_deref());
        SettingReport {
          name: spec.name,
          raw,
          value: evaluated.value,
          default: spec.default,
          min: spec.min,
          max: spec.max,
          valid: evaluated.valid,
          clamped: evaluated.clamped,
        }
      })
      .collect()
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  fn env_of(name: &str) -> Option<String> {
    match name {
      "QUOTA_SATURATION_THRESHOLD" => Some("2".into()),
      "QUOTA_SOFT_DEPRIORITIZE_FACTOR" => Some("1.5".into()),
      "QUOTA_RECORD_FLUSH_MS" => Some(" 25 ".into()),
      "QUOTA_ADMISSION" => Some("sometimes".into()),
      _ => None,
    }
  }

  #[test]
  fn numbers_fall_back_clamp_or_pass() {
    let config = Config::new(env_of);
    let (threshold, warning) = config.number(&SATURATION_THRESHOLD);
    assert_eq!(threshold, 0.5);
    assert!(warning
      .unwrap()
      .contains("QUOTA_SATURATION_THRESHOLD=\"2\""));
    // The same bad value warns once.
    assert_eq!(config.number(&SATURATION_THRESHOLD), (0.5, None));
    // Clamped into range, without a warning.
    assert_eq!(config.number(&SOFT_DEPRIORITIZE_FACTOR), (1.0, None));
    assert_eq!(config.number(&RECORD_FLUSH_MS), (25.0, None));
    assert_eq!(config.number(&RETENTION_DAYS), (14.0, None));
  }

  #[test]
  fn evaluate_reports_validity() {
    let e = evaluate(&RETENTION_DAYS, Some("x"));
    assert_eq!((e.value, e.valid, e.clamped), (14.0, false, false));
    let e = evaluate(&SOFT_DEPRIORITIZE_FACTOR, Some("-3"));
    assert_eq!((e.value, e.valid, e.clamped), (0.0, false, true));
    let e = evaluate(&SATURATION_THRESHOLD, Some("NaN"));
    assert!(!e.valid && e.value == 0.5);
    assert!(evaluate(&REDIS_TIMEOUT_MS, Some("0")).value == 1000.0);
  }

  #[test]
  fn admission_and_cluster_switch() {
    let config = Config::new(env_of);
    let (mode, warning) = config.admission();
    assert_eq!(mode, AdmissionMode::Default);
    assert!(warning.is_some());
    assert_eq!(config.admission(), (AdmissionMode::Default, None));
    assert_eq!(
      admission_of(Some("reserve")),
      (AdmissionMode::Reserve, true)
    );
    assert!(cluster_switch(Some(" YES ")) && !cluster_switch(Some("0")));
  }

  fn tls_env(name: &str) -> Option<String> {
    match name {
      "NODE_EXTRA_CA_CERTS" => Some("/etc/node-extra.pem".into()),
      "QUOTA_STORE_REDIS_CA_FILE" => Some("/etc/redis-ca.pem".into()),
      "QUOTA_STORE_REDIS_TLS_CERT_FILE" => Some("/etc/client.pem".into()),
      "QUOTA_STORE_REDIS_POOL_TOTALS" => Some("sometimes".into()),
      _ => None,
    }
  }

  #[test]
  fn tls_files_and_pool_totals() {
    use crate::store::redis::PoolTotals;
    let config = Config::new(tls_env);
    let (files, warning) = config.redis_tls_files();
    assert_eq!(
      files.ca,
      vec![
        ("NODE_EXTRA_CA_CERTS", "/etc/node-extra.pem".to_string()),
        ("QUOTA_STORE_REDIS_CA_FILE", "/etc/redis-ca.pem".to_string()),
      ]
    );
    assert_eq!(files.client, None);
    assert!(warning
      .unwrap()
      .contains("QUOTA_STORE_REDIS_TLS_CERT_FILE is set without QUOTA_STORE_REDIS_TLS_KEY_FILE"));
    assert_eq!(config.redis_tls_files().1, None, "warned once");
    let (mode, warning) = config.pool_totals();
    assert_eq!(mode, PoolTotals::Exact);
    assert!(warning
      .unwrap()
      .contains("QUOTA_STORE_REDIS_POOL_TOTALS=\"sometimes\""));
    assert_eq!(
      pool_totals_of(Some(" Aggregate ")),
      (PoolTotals::Aggregate, true)
    );
    assert_eq!(pool_totals_of(None), (PoolTotals::Exact, true));
  }

  #[test]
  fn scheduler_max_ids_defaults_to_100k_and_clamps() {
    let at = |raw: Option<&str>| evaluate(&SCHEDULER_MAX_IDS, raw).value;
    assert_eq!(at(None), 100_000.0);
    assert_eq!(at(Some("5000")), 5_000.0);
    assert_eq!(at(Some("10")), 1_000.0);
    assert_eq!(at(Some("1e12")), 100_000_000.0);
    assert_eq!(at(Some("lots")), 100_000.0);
  }
}
