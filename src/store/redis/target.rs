//! Which Redis a URL names — one server, a cluster or a Sentinel-managed primary, over TLS
//! for `rediss` (the forms: docs/redis.md#url-forms) — and how to show the URL in messages
//! (its password masked).

use super::keys::KeyLayout;
use crate::error::{QuotaError, Result};
use redis::{ConnectionInfo, IntoConnectionInfo};

/// Where the server is.
#[derive(Debug, Clone)]
pub enum Topology {
  /// One server.
  Single(ConnectionInfo),
  /// A cluster's seed nodes.
  Cluster(Vec<ConnectionInfo>),
  /// The primary named `master` by these Sentinels.
  Sentinel(SentinelTarget),
}

/// A Sentinel-managed primary.
#[derive(Debug, Clone)]
pub struct SentinelTarget {
  /// The Sentinels (host, port).
  pub sentinels: Vec<(String, u16)>,
  /// The master name the Sentinels monitor.
  pub master: String,
  /// The data nodes' user, password (decoded) and database.
  pub username: Option<String>,
  pub password: Option<String>,
  pub db: i64,
}

/// A parsed Redis URL.
#[derive(Debug, Clone)]
pub struct RedisTarget {
  /// Where the server is.
  pub topology: Topology,
  /// `rediss`: TLS to every node.
  pub tls: bool,
  /// The URL with its password masked, for messages.
  pub display: String,
}

impl RedisTarget {
  /// How keys are named there: hash-tagged per pool in a cluster.
  pub fn layout(&self) -> KeyLayout {
    match self.topology {
      Topology::Cluster(_) => KeyLayout::Cluster,
      _ => KeyLayout::Standalone,
    }
  }
}

/// `scheme://user:***@host…`: the password of the URL's user info replaced by `***`.
pub fn mask_url(url: &str) -> String {
  let Some(start) = url.find("://").map(|i| i + 3) else {
    return url.to_string();
  };
  let authority_end = url[start..]
    .find(['/', '?', '#'])
    .map_or(url.len(), |i| start + i);
  let authority = &url[start..authority_end];
  let Some(at) = authority.rfind('@') else {
    // A password with a raw `/`, `?` or `#` ends the authority early.
    return mask_secrets(url);
  };
  let user_info = &authority[..at];
  let Some(colon) = user_info.find(':') else {
    return url.to_string();
  };
  format!(
    "{}{}:***{}",
    &url[..start],
    &user_info[..colon],
    &url[start + at..]
  )
}

/// Every `scheme://user:password@` in `text` with its password replaced by `***` (log
/// messages and fields may carry URLs anywhere).
pub fn mask_secrets(text: &str) -> String {
  let mut out = String::with_capacity(text.len());
  let mut rest = text;
  while let Some(found) = rest.find("://") {
    let scheme_start = rest[..found]
      .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
      .map_or(0, |i| i + 1);
    let after = &rest[found + 3..];
    let user_end = after.find(|c: char| c == ':' || c == '/' || c == '@' || c.is_whitespace());
    let masked = (scheme_start < found)
      .then_some(user_end)
      .flatten()
      .filter(|&i| after[i..].starts_with(':'))
      .and_then(|colon| {
        let password = &after[colon + 1..];
        let end = password.find(|c: char| c == '@' || c.is_whitespace())?;
        (end > 0 && password[end..].starts_with('@')).then_some((colon, end))
      });
    match masked {
      Some((colon, end)) => {
        out.push_str(&rest[..found + 3 + colon + 1]);
        out.push_str("***");
        rest = &after[colon + 1 + end..];
      }
      None => {
        out.push_str(&rest[..found + 3]);
        rest = after;
      }
    }
  }
  out.push_str(rest);
  out
}

fn invalid(url: &str, why: impl std::fmt::Display) -> QuotaError {
  QuotaError::range_error("url", format!("{why} ({})", mask_url(url)))
}

fn node_info(url: &str, node: &str) -> Result<ConnectionInfo> {
  node
    .into_connection_info()
    .map_err(|e| invalid(url, format!("not a Redis URL: {e}")))
}

/// Splits `host:port,host:port` (IPv6 in brackets) into addresses, `default_port` when
/// a port is left out.
fn hosts(url: &str, list: &str, default_port: u16) -> Result<Vec<(String, u16)>> {
  let mut out = Vec::new();
  for host in list.split(',').map(str::trim).filter(|h| !h.is_empty()) {
    let (name, port) = match host.rfind(':') {
      Some(colon) if !host.ends_with(']') => (&host[..colon], &host[colon + 1..]),
      _ => (host, ""),
    };
    let port = if port.is_empty() {
      default_port
    } else {
      port
        .parse::<u16>()
        .map_err(|_| invalid(url, format!("bad port in {host:?}")))?
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    if name.is_empty() {
      return Err(invalid(url, format!("no host in {host:?}")));
    }
    out.push((name.to_string(), port));
  }
  Ok(out)
}

/// The Sentinel target of a `redis+sentinel` URL's parts (after the scheme).
fn sentinel(url: &str, user_info: &str, host_list: &str, tail: &str) -> Result<SentinelTarget> {
  let sentinels = hosts(url, host_list, 26379)?;
  if sentinels.is_empty() {
    return Err(invalid(url, "no Sentinel address in the URL"));
  }
  let path = tail.split(['?', '#']).next().unwrap_or_default();
  let mut parts = path.trim_start_matches('/').split('/');
  let master = parts.next().unwrap_or_default().to_string();
  if master.is_empty() {
    return Err(invalid(
      url,
      "a Sentinel URL names its master: redis+sentinel://host:port[,host:port]/<master name>[/db]",
    ));
  }
  let db = match parts.next().filter(|d| !d.is_empty()) {
    None => 0,
    Some(db) => db
      .parse::<i64>()
      .map_err(|_| invalid(url, format!("bad database number {db:?}")))?,
  };
  // The credentials, percent-decoded as the crate decodes a redis:// URL's.
  let (first_host, first_port) = &sentinels[0];
  let creds = node_info(
    url,
    &format!("redis://{user_info}{first_host}:{first_port}"),
  )?;
  let settings = creds.redis_settings();
  Ok(SentinelTarget {
    sentinels,
    master,
    username: settings.username().map(str::to_string),
    password: settings.password().map(str::to_string),
    db,
  })
}

/// Parses `url`; `cluster_switch` is `QUOTA_STORE_REDIS_CLUSTER`.
pub fn parse_target(url: &str, cluster_switch: bool) -> Result<RedisTarget> {
  let url = url.trim();
  let Some((scheme, rest)) = url.split_once("://") else {
    return Err(invalid(url, "expected a redis:// URL"));
  };
  let scheme = scheme.to_ascii_lowercase();
  let tls = scheme.starts_with("rediss");
  let base_scheme = if tls { "rediss" } else { "redis" };
  // `[user info@]host:port[,host:port…][/path][?query]`.
  let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
  let (user_info, host_list) = match authority.rfind('@') {
    Some(at) => (&authority[..=at], &authority[at + 1..]),
    None => ("", authority),
  };
  let topology = match scheme.as_str() {
    "redis+unix" | "unix" => Topology::Single(node_info(url, url)?),
    "redis" | "rediss" if !cluster_switch => {
      Topology::Single(node_info(url, &format!("{base_scheme}://{rest}"))?)
    }
    "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => {
      let nodes = host_list
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|host| node_info(url, &format!("{base_scheme}://{user_info}{host}{tail}")))
        .collect::<Result<Vec<_>>>()?;
      if nodes.is_empty() {
        return Err(invalid(url, "no cluster node in the URL"));
      }
      Topology::Cluster(nodes)
    }
    "redis+sentinel" | "rediss+sentinel" => {
      Topology::Sentinel(sentinel(url, user_info, host_list, tail)?)
    }
    _ => return Err(invalid(url, format!("unknown scheme {scheme:?}"))),
  };
  Ok(RedisTarget {
    topology,
    tls,
    display: mask_url(url),
  })
}

// The URL forms, the masking and the bad URLs have their cases in tests/redis_target.rs.
