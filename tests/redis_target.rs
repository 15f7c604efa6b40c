//! Redis URLs: the standalone, cluster, TLS and Sentinel forms, the password masked in
//! every text, and bad URLs as RangeErrors that name `url` without the password.

use omniroute_quota_engine::store::redis::target::*;
use omniroute_quota_engine::store::redis::KeyLayout;

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
  assert_eq!(one.layout(), KeyLayout::Standalone);
  assert!(matches!(one.topology, Topology::Single(_)) && !one.tls);

  let seeds = parse_target("redis+cluster://u:pw@127.0.0.1:7001,127.0.0.1:7002", false).unwrap();
  assert_eq!(seeds.layout(), KeyLayout::Cluster);
  let Topology::Cluster(nodes) = &seeds.topology else {
    panic!("{:?}", seeds.topology)
  };
  assert_eq!(nodes.len(), 2);
  assert_eq!(
    seeds.display,
    "redis+cluster://u:***@127.0.0.1:7001,127.0.0.1:7002"
  );
  assert_eq!(nodes[1].redis_settings().password(), Some("pw"));

  let switched = parse_target("redis://127.0.0.1:7001", true).unwrap();
  assert_eq!(switched.layout(), KeyLayout::Cluster);
}

#[test]
fn tls_and_sentinel_forms() {
  let tls = parse_target("rediss://alice:pw@cache.example:6380/2", false).unwrap();
  assert!(tls.tls);
  let Topology::Single(info) = &tls.topology else {
    panic!()
  };
  assert!(
    matches!(info.addr(), redis::ConnectionAddr::TcpTls { host, port: 6380, .. } if host == "cache.example")
  );
  assert_eq!(info.redis_settings().username(), Some("alice"));
  assert_eq!(tls.display, "rediss://alice:***@cache.example:6380/2");
  let cluster = parse_target("rediss+cluster://a:1,b:2", false).unwrap();
  assert!(cluster.tls && cluster.layout() == KeyLayout::Cluster);

  let s = parse_target(
    "redis+sentinel://bob:p%40ss@10.0.0.1:26380,[::1],s3/mymaster/3",
    false,
  )
  .unwrap();
  assert_eq!(s.layout(), KeyLayout::Standalone);
  assert_eq!(
    s.display,
    "redis+sentinel://bob:***@10.0.0.1:26380,[::1],s3/mymaster/3"
  );
  let Topology::Sentinel(sentinel) = &s.topology else {
    panic!()
  };
  assert_eq!(
    sentinel.sentinels,
    vec![
      ("10.0.0.1".into(), 26380),
      ("::1".into(), 26379),
      ("s3".into(), 26379)
    ]
  );
  assert_eq!(sentinel.master, "mymaster");
  assert_eq!(sentinel.username.as_deref(), Some("bob"));
  assert_eq!(sentinel.password.as_deref(), Some("p@ss"));
  assert_eq!(sentinel.db, 3);
  assert!(parse_target("rediss+sentinel://s1/m", false).unwrap().tls);
}

#[test]
fn bad_urls_are_range_errors_naming_url_without_the_password() {
  for url in [
    "",
    "127.0.0.1:6379",
    "http://x",
    "redis+cluster://u:secret@",
    "redis+sentinel://u:secret@h:26379",
    "redis+sentinel://u:secret@h:x/m",
    "redis+sentinel://u:secret@/m",
    "redis+sentinel://u:secret@h/m/zero",
    "redis://:secret/x@127.0.0.1:6379",
    "redis://:secret#x@127.0.0.1:6379",
    "redis://:secret?x@127.0.0.1:6379",
  ] {
    let err = parse_target(url, false).unwrap_err();
    assert_eq!(err.code(), "ERR_QUOTA_INVALID_ARG", "{url}");
    let text = err.to_string();
    assert!(text.starts_with("url: "), "{text}");
    assert!(!text.contains("secret"), "{text}");
  }
}
