//! Saturation signals for the process (docs/contract.md §8): the 30 s cache, the registry
//! of which providers have a fetcher, the last rate-limit headers per connection, and the
//! fallback. The fetchers are the host's JavaScript functions, kept by the edge under the
//! names this registry hands out, so the wildcard, precedence and fallback are decided here
//! only. A stale entry's refresh is asked for on the JS thread that found it and handed to
//! that thread's next enforce answer (or `takeSaturationRefreshes()`), which runs the fetcher.

use super::relock;
use super::telemetry::LogValue;
use crate::core::dimensions::{named_enum, QuotaUnit, QuotaWindow};
use crate::core::enforce::SaturationLookup;
use crate::core::saturation::{Entry, HeaderReading, HeaderReadings, SaturationCache};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::cell::RefCell;
use std::sync::Mutex;

/// Connections whose header readings are kept at most; past it the stale ones go (all,
/// when every one is fresh).
const MAX_HEADER_SNAPSHOTS: usize = 10_000;

named_enum! {
  /// Who registered a fetcher: the host (`installHost({ saturationFetchers })`,
  /// `registerSaturationFetcher`) or a test seam (`__set…ForTests`), which only serves
  /// providers no host fetcher serves. Its name prefixes the names handed to the edge.
  pub enum FetcherTier {
    Host = "host",
    Seam = "seam",
  }
}

/// A refresh a lookup asked for: `(provider, connectionId, unit, window)`.
pub type Refresh = (String, String, QuotaUnit, QuotaWindow);

fn owned((provider, connection_id, unit, window): Entry) -> Refresh {
  (provider.into(), connection_id.into(), unit, window)
}

/// A refresh asked for longer ago than this is taken as lost (its thread ended), and may
/// be asked for again.
const REFRESH_LOST_MS: i64 = 60_000;

thread_local! {
  /// The refreshes asked for on this thread, for its next answer to JavaScript.
  static REFRESHES: RefCell<Vec<(Refresh, String)>> = const { RefCell::new(Vec::new()) };
}

/// The refreshes asked for on this thread since the last call, each with the name of the
/// fetcher to call (`None`: none).
pub fn take_refreshes() -> Option<Vec<(Refresh, String)>> {
  REFRESHES.with(|queue| {
    let mut queue = queue.borrow_mut();
    (!queue.is_empty()).then(|| std::mem::take(&mut *queue))
  })
}

/// The process's saturation state.
#[derive(Default)]
pub struct SaturationState {
  cache: SaturationCache,
  /// The providers with a fetcher, per tier (`[host, seam]`): looked up by `&str`.
  fetchers: [HashSet<String>; 2],
  /// Per provider, per connection: looked up by `&str` on every decision, so no key is
  /// allocated for it.
  headers: HashMap<String, HashMap<String, HeaderReadings>>,
  /// Refreshes in flight, and when each was asked for. Behind its own lock: the decision
  /// reads the state through a shared reference.
  refreshing: Mutex<HashMap<Refresh, i64>>,
  /// `(provider, connectionId)` whose fetch timed out, warned about once until a fetch of
  /// it answers.
  timed_out: HashSet<(String, String)>,
}

/// What a `getSaturation` lookup must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
  /// The value is known: cached, or the fallback when no fetcher serves the provider.
  Known { value: f64, cached: bool },
  /// Call the fetcher `name` (`"<tier>:<provider or *>"`), then store its answer.
  Fetch { name: String },
}

impl Lookup {
  fn known(value: f64, cached: bool) -> Self {
    Lookup::Known { value, cached }
  }
}

impl SaturationState {
  /// Replaces the fetchers of `tier` with `providers` (`"*"`: every provider).
  pub fn set_fetchers(&mut self, tier: FetcherTier, providers: impl IntoIterator<Item = String>) {
    let fetchers = &mut self.fetchers[tier as usize];
    fetchers.clear();
    fetchers.extend(providers);
  }

  /// The fetcher serving `provider`: the host's for it, the host's `"*"`, the seam's for
  /// it, the seam's `"*"` — in that order.
  pub fn fetcher_for(&self, provider: &str) -> Option<(FetcherTier, &str)> {
    [FetcherTier::Host, FetcherTier::Seam]
      .into_iter()
      .find_map(|tier| {
        [provider, "*"].into_iter().find_map(|name| {
          self.fetchers[tier as usize]
            .get(name)
            .map(|n| (tier, n.as_str()))
        })
      })
  }

  /// The fallback when no fetcher answers, as the host's module falls back: for anthropic
  /// (`anthropic`, `claude`), the requests headers kept under `anthropic`; for any other
  /// provider, its token headers; at most 5 min old, else 0.
  pub fn fallback(&self, provider: &str, connection_id: &str, now_ms: i64) -> f64 {
    if matches!(provider, "anthropic" | "claude") {
      return (self.headers("anthropic", connection_id))
        .and_then(|readings| readings.requests?.saturation(now_ms))
        .unwrap_or(0.0);
    }
    (self.headers(provider, connection_id))
      .and_then(|readings| readings.tokens?.saturation(now_ms))
      .unwrap_or(0.0)
  }

  /// What `getSaturation(connectionId, provider, { unit, window })` must do now.
  pub fn lookup(&self, entry: Entry, now_ms: i64) -> Lookup {
    let (provider, connection_id, ..) = entry;
    let cached = self.cache.get(entry, now_ms);
    if let Some((value, true)) = cached {
      return Lookup::known(value, true);
    }
    let Some((tier, name)) = self.fetcher_for(provider) else {
      let value = self.fallback(provider, connection_id, now_ms);
      return Lookup::known(value, false);
    };
    let name = format!("{}:{name}", tier.as_str());
    match cached {
      Some((stale, _)) => {
        self.ask_refresh(entry, name, now_ms);
        Lookup::known(stale, true)
      }
      None => Lookup::Fetch { name },
    }
  }

  /// Asks this thread's next answer to refresh an entry, unless a refresh of it is in
  /// flight in the process.
  fn ask_refresh(&self, entry: Entry, name: String, now_ms: i64) {
    let refresh: Refresh = owned(entry);
    {
      let mut refreshing = relock(&self.refreshing);
      match refreshing.get(&refresh) {
        Some(&asked) if now_ms.saturating_sub(asked) < REFRESH_LOST_MS => return,
        _ => {}
      }
      if refreshing.len() >= 10_000 {
        refreshing.retain(|_, asked| now_ms.saturating_sub(*asked) < REFRESH_LOST_MS);
      }
      refreshing.insert(refresh.clone(), now_ms);
    }
    REFRESHES.with(|queue| queue.borrow_mut().push((refresh, name)));
  }

  /// A fetch of `(provider, connectionId)` timed out: whether to warn (the first time
  /// since a fetch of it last answered).
  pub fn fetch_timed_out(&mut self, provider: &str, connection_id: &str) -> bool {
    if self.timed_out.len() >= MAX_HEADER_SNAPSHOTS {
      self.timed_out.clear();
    }
    self
      .timed_out
      .insert((provider.to_string(), connection_id.to_string()))
  }

  /// Stores a fetcher's answer for 30 s and returns the stored value: clamped into
  /// 0..1; no answer (`None`, NaN) takes the fallback. Ends the entry's refresh, and an
  /// answer ends its timeout.
  pub fn store(&mut self, entry: Entry, value: Option<f64>, now_ms: i64) -> f64 {
    let (provider, connection_id, ..) = entry;
    let answered = value.filter(|v| !v.is_nan());
    relock(&self.refreshing).remove(&owned(entry));
    if answered.is_some() && !self.timed_out.is_empty() {
      self
        .timed_out
        .remove(&(provider.to_string(), connection_id.to_string()));
    }
    let value = answered.unwrap_or_else(|| self.fallback(provider, connection_id, now_ms));
    self.cache.put(entry, value, now_ms)
  }

  /// Keeps the readings of a response: each replaces the connection's reading of its kind.
  pub fn store_headers(
    &mut self,
    provider: String,
    connection_id: String,
    readings: HeaderReadings,
    now_ms: i64,
  ) {
    if readings == HeaderReadings::default() {
      return;
    }
    let known = |c: &HashMap<String, HeaderReadings>| c.contains_key(&connection_id);
    let new = !self.headers.get(&provider).is_some_and(known);
    if new && self.header_connections() >= MAX_HEADER_SNAPSHOTS {
      let fresh = |r: Option<HeaderReading>| r.is_some_and(|r| r.saturation(now_ms).is_some());
      self.headers.retain(|_, connections| {
        connections.retain(|_, known| fresh(known.requests) || fresh(known.tokens));
        !connections.is_empty()
      });
      if self.header_connections() >= MAX_HEADER_SNAPSHOTS {
        self.clear_headers();
      }
    }
    let known = self.headers.entry(provider).or_default();
    let known = known.entry(connection_id).or_default();
    known.requests = readings.requests.or(known.requests);
    known.tokens = readings.tokens.or(known.tokens);
  }

  /// How many connections have readings (a pass over the providers, a handful).
  fn header_connections(&self) -> usize {
    self.headers.values().map(HashMap::len).sum()
  }

  /// The readings kept for a connection.
  pub fn headers(&self, provider: &str, connection_id: &str) -> Option<&HeaderReadings> {
    self.headers.get(provider)?.get(connection_id)
  }

  /// `_clearSaturationCache()`.
  pub fn clear_cache(&mut self) {
    self.cache.clear();
    relock(&self.refreshing).clear();
    self.timed_out.clear();
  }

  /// `_clearRateLimitHeaders()`.
  pub fn clear_headers(&mut self) {
    self.headers.clear();
  }
}

impl super::Engine {
  /// `getSaturation`'s first step (counted in the metrics): the value (a cache hit, or the
  /// fallback when no fetcher serves the provider, kept like a fetched value for 30 s), or
  /// the name of the fetcher to call. Unknown units and windows read 0.
  pub fn saturation_lookup(
    &self,
    provider: &str,
    connection_id: &str,
    unit: &str,
    window: &str,
    now_ms: i64,
  ) -> Lookup {
    let (Some(unit), Some(window)) = (QuotaUnit::parse(unit), QuotaWindow::parse(window)) else {
      return Lookup::known(0.0, true);
    };
    let mut state = self.saturation();
    let lookup = state.lookup((provider, connection_id, unit, window), now_ms);
    let hit = match lookup {
      Lookup::Known {
        value,
        cached: false,
      } => {
        state.store((provider, connection_id, unit, window), Some(value), now_ms);
        false
      }
      Lookup::Known { cached, .. } => cached,
      Lookup::Fetch { .. } => false,
    };
    drop(state);
    self.metrics.saturation_lookup(hit);
    lookup
  }

  /// Stores a fetcher's answer (see [`SaturationState::store`]); unknown units and windows
  /// store nothing and read 0.
  pub fn put_saturation(
    &self,
    provider: &str,
    connection_id: &str,
    unit: &str,
    window: &str,
    value: Option<f64>,
    now_ms: i64,
  ) -> f64 {
    let (Some(unit), Some(window)) = (QuotaUnit::parse(unit), QuotaWindow::parse(window)) else {
      return 0.0;
    };
    let mut state = self.saturation();
    state.store((provider, connection_id, unit, window), value, now_ms)
  }

  /// Records an upstream response's rate-limit headers (`[name, value]` pairs; others are
  /// ignored).
  pub fn store_rate_limit_headers(
    &self,
    connection_id: String,
    provider: String,
    pairs: &[Vec<String>],
    now_ms: i64,
  ) {
    let pairs = pairs.iter().filter(|p| p.len() == 2);
    let pairs = pairs.map(|p| (p[0].as_str(), p[1].as_str()));
    let readings = crate::core::saturation::parse_rate_limit_headers(pairs, now_ms);
    (self.saturation()).store_headers(provider, connection_id, readings, now_ms);
  }

  /// The token-header fallback signal of a connection: `used / limit` from headers at
  /// most 5 min old.
  pub fn token_header_saturation(
    &self,
    provider: &str,
    connection_id: &str,
    now_ms: i64,
  ) -> Option<crate::core::saturation::TokenHeaderSaturation> {
    let state = self.saturation();
    state
      .headers(provider, connection_id)?
      .tokens?
      .token_saturation(now_ms)
  }

  /// A saturation fetch took longer than `QUOTA_SATURATION_FETCH_TIMEOUT_MS` and its
  /// fallback was used: one warning per `(provider, connectionId)` until a fetch of it
  /// answers again.
  pub fn saturation_fetch_timed_out(&self, provider: &str, connection_id: &str, timeout_ms: f64) {
    if self.saturation().fetch_timed_out(provider, connection_id) {
      self.logs.push(
        "warn",
        "quota:saturation",
        "saturation fetch timed out; using the fallback until it answers",
        vec![
          ("provider", LogValue::Text(provider.to_string())),
          ("connectionId", LogValue::Text(connection_id.to_string())),
          ("timeoutMs", LogValue::Number(timeout_ms)),
        ],
      );
    }
  }
}

/// Refreshes as `[provider, connectionId, unit, window, fetcher name]`, for JavaScript.
pub fn refreshes_as_text(refreshes: Vec<(Refresh, String)>) -> Vec<Vec<String>> {
  refreshes
    .into_iter()
    .map(|((p, c, u, w), name)| vec![p, c, u.as_str().to_string(), w.as_str().to_string(), name])
    .collect()
}

/// The saturation view the enforce decision reads: a cache hit, the fallback when no
/// fetcher serves the provider, or `None` — fetch first.
pub struct DecisionLookup<'a> {
  pub state: &'a SaturationState,
  pub now_ms: i64,
}

impl<'a> DecisionLookup<'a> {
  pub fn new(state: &'a SaturationState, now_ms: i64) -> Self {
    DecisionLookup { state, now_ms }
  }
}

impl SaturationLookup for DecisionLookup<'_> {
  fn saturation(
    &self,
    connection_id: &str,
    provider: &str,
    unit: QuotaUnit,
    window: QuotaWindow,
  ) -> Option<f64> {
    match self
      .state
      .lookup((provider, connection_id, unit, window), self.now_ms)
    {
      Lookup::Known { value, .. } => Some(value),
      Lookup::Fetch { .. } => None,
    }
  }
}

#[cfg(test)]
mod tests {
  use super::*;
  use crate::core::saturation::{parse_rate_limit_headers, HEADER_FRESHNESS_MS};

  const NOW: i64 = 1_700_000_000_000;

  #[test]
  fn host_fetchers_come_before_seams_and_the_wildcard_after_the_provider() {
    let mut state = SaturationState::default();
    assert_eq!(state.fetcher_for("codex"), None);
    state.set_fetchers(FetcherTier::Seam, ["*".to_string(), "claude".to_string()]);
    assert_eq!(
      state.fetcher_for("claude"),
      Some((FetcherTier::Seam, "claude"))
    );
    assert_eq!(state.fetcher_for("codex"), Some((FetcherTier::Seam, "*")));
    state.set_fetchers(FetcherTier::Host, ["*".to_string()]);
    assert_eq!(state.fetcher_for("claude"), Some((FetcherTier::Host, "*")));
    state.set_fetchers(FetcherTier::Host, ["*".to_string(), "claude".to_string()]);
    assert_eq!(
      state.fetcher_for("claude"),
      Some((FetcherTier::Host, "claude"))
    );
    state.set_fetchers(FetcherTier::Host, Vec::new());
    assert_eq!(
      state.fetcher_for("claude"),
      Some((FetcherTier::Seam, "claude"))
    );
  }

  /// Issue 15 item 2: past its 30 s an entry is served while one refresh runs; a second
  /// lookup does not ask again, an answer ends the refresh, and past the stale bound a
  /// request waits for the fetch again.
  #[test]
  fn an_expired_entry_is_served_while_one_refresh_runs() {
    use crate::core::saturation::{SATURATION_STALE_MS, SATURATION_TTL_MS};
    let mut state = SaturationState::default();
    let (u, w) = (QuotaUnit::Tokens, QuotaWindow::FiveHours);
    let key = ("codex", "c", u, w);
    state.set_fetchers(FetcherTier::Host, ["codex".to_string()]);
    let _ = take_refreshes();
    state.store(key, Some(0.4), NOW);
    let later = NOW + SATURATION_TTL_MS + 1;
    let served = Lookup::known(0.4, true);
    assert_eq!(state.lookup(key, later), served);
    assert_eq!(state.lookup(key, later + 5), served);
    let view = DecisionLookup::new(&state, later + 6);
    assert_eq!(view.saturation("c", "codex", u, w), Some(0.4));
    assert_eq!(
      take_refreshes(),
      Some(vec![(
        ("codex".to_string(), "c".to_string(), u, w),
        "host:codex".to_string()
      )]),
      "one refresh for three lookups"
    );
    assert_eq!(take_refreshes(), None);
    state.store(key, Some(0.6), later + 10);
    let again = later + 10 + SATURATION_TTL_MS;
    assert_eq!(state.lookup(key, again).clone(), Lookup::known(0.6, true));
    assert_eq!(
      take_refreshes().map(|r| r.len()),
      Some(1),
      "asked again after the answer"
    );
    let too_old = again + SATURATION_STALE_MS;
    assert_eq!(
      state.lookup(key, too_old),
      Lookup::Fetch {
        name: "host:codex".into()
      }
    );
    assert!(state.fetch_timed_out("codex", "c"));
    assert!(!state.fetch_timed_out("codex", "c"), "warned once");
    state.store(key, Some(0.1), too_old);
    assert!(
      state.fetch_timed_out("codex", "c"),
      "an answer ends the timeout"
    );
  }

  #[test]
  fn each_reading_is_kept_until_a_response_carries_a_usable_one_of_its_kind() {
    let mut state = SaturationState::default();
    let mut respond = |headers: &[(&str, &str)], at: i64| {
      let readings = parse_rate_limit_headers(headers.iter().copied(), at);
      state.store_headers("anthropic".into(), "c".into(), readings, at);
      let tokens = (state.headers("anthropic", "c"))
        .and_then(|r| r.tokens?.saturation(at))
        .unwrap_or(0.0);
      (tokens, state.fallback("anthropic", "c", at))
    };
    let tokens = [
      ("anthropic-ratelimit-tokens-limit", "1000"),
      ("anthropic-ratelimit-tokens-remaining", "100"),
    ];
    assert_eq!(respond(&tokens, NOW), (0.9, 0.0));
    let requests = [
      ("anthropic-ratelimit-requests-limit", "50"),
      ("anthropic-ratelimit-requests-remaining", "10"),
    ];
    assert_eq!(respond(&requests, NOW + 1), (0.9, 0.8));
    // Unusable token headers, or none, change nothing.
    assert_eq!(
      respond(&[("anthropic-ratelimit-tokens-limit", "0")], NOW + 2),
      (0.9, 0.8)
    );
    assert_eq!(
      respond(&[("content-type", "text/plain")], NOW + 3),
      (0.9, 0.8)
    );
  }

  #[test]
  fn past_its_bound_the_header_store_drops_stale_connections_first() {
    let mut state = SaturationState::default();
    let headers = [
      ("x-ratelimit-limit-tokens", "100"),
      ("x-ratelimit-remaining-tokens", "10"),
    ];
    let store = |state: &mut SaturationState, connection: String, at: i64| {
      let readings = parse_rate_limit_headers(headers, at);
      state.store_headers("openai".into(), connection, readings, at);
    };
    store(&mut state, "old".into(), NOW);
    for i in 1..MAX_HEADER_SNAPSHOTS {
      store(&mut state, format!("c{i}"), NOW + HEADER_FRESHNESS_MS);
    }
    store(&mut state, "new".into(), NOW + HEADER_FRESHNESS_MS + 1);
    assert_eq!(state.header_connections(), MAX_HEADER_SNAPSHOTS);
    assert!(state.headers("openai", "old").is_none());
    assert!(state.headers("openai", "c1").is_some());
    // A connection it holds is updated in place.
    store(&mut state, "c1".into(), NOW + HEADER_FRESHNESS_MS + 1);
    assert!(state.headers("openai", "c2").is_some());
    // All fresh: it starts over.
    store(&mut state, "newer".into(), NOW + HEADER_FRESHNESS_MS + 1);
    assert_eq!(state.header_connections(), 1);
  }

  #[test]
  fn a_lookup_is_a_hit_a_fetch_or_the_header_fallback() {
    let mut state = SaturationState::default();
    let (u, w) = (QuotaUnit::Tokens, QuotaWindow::Hourly);
    let key = ("openai", "c", u, w);
    assert_eq!(state.lookup(key, NOW), Lookup::known(0.0, false));
    let headers = [
      ("x-ratelimit-limit-tokens", "1000"),
      ("x-ratelimit-remaining-tokens", "250"),
    ];
    let readings = parse_rate_limit_headers(headers, NOW);
    state.store_headers("openai".into(), "c".into(), readings, NOW);
    assert_eq!(state.lookup(key, NOW), Lookup::known(0.75, false));
    state.set_fetchers(FetcherTier::Host, ["openai".to_string()]);
    assert_eq!(
      state.lookup(key, NOW),
      Lookup::Fetch {
        name: "host:openai".into()
      }
    );
    // No answer takes the fallback; an answer is clamped and cached.
    assert_eq!(state.store(key, None, NOW), 0.75);
    assert_eq!(state.lookup(key, NOW + 1), Lookup::known(0.75, true));
    assert_eq!(state.store(key, Some(7.0), NOW), 1.0);
    let view = DecisionLookup::new(&state, NOW + 1);
    assert_eq!(view.saturation("c", "openai", u, w), Some(1.0));
    assert_eq!(view.saturation("other", "openai", u, w), None);
  }
}
