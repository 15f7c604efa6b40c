//! Which Redis a URL names: one server or a cluster, and how to show the URL in messages.
//!
//! URL forms:
//! - `redis://[user:password@]host[:port][/db]` — one server (the host's form);
//!   `redis+unix:///path/to/socket` and `unix:///path` for a Unix socket.
//! - `redis+cluster://[user:password@]host1:port1[,host2:port2…]` — Redis Cluster, the
//!   hosts being seed nodes (one is enough). The same with `redis://` when
//!   `QUOTA_STORE_REDIS_CLUSTER` is `1`/`true`/`yes`.
//!
//! `rediss://` (TLS) is refused: this build carries no TLS stack.

use super::keys::KeyLayout;
use crate::error::{QuotaError, Result};
use redis::{ConnectionInfo, IntoConnectionInfo};

/// A parsed Redis URL.
#[derive(Debug, Clone)]
pub struct RedisTarget {
  /// How keys are named there.
  pub layout: KeyLayout,
  /// One node (standalone) or the seed nodes (cluster).
  pub nodes: Vec<ConnectionInfo>,
  /// The URL with its password masked, for messages.
  pub display: String,
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
    return url.to_string();
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

/// Parses `url`; `cluster_switch` is `QUOTA_STORE_REDIS_CLUSTER`.
pub fn parse_target(url: &str, cluster_switch: bool) -> Result<RedisTarget> {
  let url = url.trim();
  let Some(scheme_end) = url.find("://") else {
    return Err(invalid(url, "expected a redis:// URL"));
  };
  let scheme = url[..scheme_end].to_ascii_lowercase();
  let rest = &url[scheme_end + 3..];
  let (cluster, base_scheme) = match scheme.as_str() {
    "redis+cluster" => (true, "redis"),
    "rediss+cluster" | "rediss" => {
      return Err(invalid(
        url,
        "TLS (rediss://) is not supported by this build",
      ))
    }
    "redis" => (cluster_switch, "redis"),
    "redis+unix" | "unix" => (false, ""),
    _ => return Err(invalid(url, format!("unknown scheme {scheme:?}"))),
  };
  let display = mask_url(url);
  if !cluster {
    return Ok(RedisTarget {
      layout: KeyLayout::Standalone,
      nodes: vec![node_info(url, url)?],
      display,
    });
  }
  // Seed nodes: `[user info@]host:port,host:port[/path][?query]`.
  let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
  let (authority, tail) = rest.split_at(authority_end);
  let (user_info, hosts) = match authority.rfind('@') {
    Some(at) => (&authority[..=at], &authority[at + 1..]),
    None => ("", authority),
  };
  let nodes = hosts
    .split(',')
    .map(str::trim)
    .filter(|h| !h.is_empty())
    .map(|host| node_info(url, &format!("{base_scheme}://{user_info}{host}{tail}")))
    .collect::<Result<Vec<_>>>()?;
  if nodes.is_empty() {
    return Err(invalid(url, "no cluster node in the URL"));
  }
  Ok(RedisTarget {
    layout: KeyLayout::Cluster,
    nodes,
    display,
  })
}

#[cfg(test)]
mod tests {
  use super::*;

  #[test]
  fn secrets_are_masked_anywhere_in_a_text() {
    assert_eq!(
      mask_secrets("at redis://u:p4ss@h:6379/0 and rediss://:x@y, not http://host/a:b@c"),
      "at redis://u:***@h:6379/0 and rediss://:***@y, not http://host/a:b@c"
    );
    assert_eq!(mask_secrets("no url"), "no url");
    assert_eq!(mask_secrets("://x:y@z"), "://x:y@z");
  }

  #[test]
  fn masks_the_password_only() {
    assert_eq!(
      mask_url("redis://user:secret@10.0.0.1:6379/0"),
      "redis://user:***@10.0.0.1:6379/0"
    );
    assert_eq!(mask_url("redis://:p%40ss@host"), "redis://:***@host");
    assert_eq!(mask_url("redis://host:6379"), "redis://host:6379");
    assert_eq!(mask_url("redis://user@host"), "redis://user@host");
    assert_eq!(mask_url("not a url"), "not a url");
  }

  #[test]
  fn standalone_and_cluster_forms() {
    let one = parse_target("redis://127.0.0.1:6390", false).unwrap();
    assert_eq!(one.layout, KeyLayout::Standalone);
    assert_eq!(one.nodes.len(), 1);

    let seeds = parse_target("redis+cluster://u:pw@127.0.0.1:7001,127.0.0.1:7002", false).unwrap();
    assert_eq!(seeds.layout, KeyLayout::Cluster);
    assert_eq!(seeds.nodes.len(), 2);
    assert_eq!(
      seeds.display,
      "redis+cluster://u:***@127.0.0.1:7001,127.0.0.1:7002"
    );
    assert_eq!(seeds.nodes[1].redis_settings().password(), Some("pw"));

    let switched = parse_target("redis://127.0.0.1:7001", true).unwrap();
    assert_eq!(switched.layout, KeyLayout::Cluster);
  }

  #[test]
  fn bad_urls_are_range_errors_naming_url_without_the_password() {
    for url in [
      "",
      "127.0.0.1:6379",
      "http://x",
      "rediss://u:secret@host",
      "redis+cluster://u:secret@",
    ] {
      let err = parse_target(url, false).unwrap_err();
      assert_eq!(err.code(), "ERR_QUOTA_INVALID_ARG", "{url}");
      let text = err.to_string();
      assert!(text.starts_with("url: "), "{text}");
      assert!(!text.contains("secret"), "{text}");
    }
  }
}
