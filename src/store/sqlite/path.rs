//! Where the host keeps `storage.sqlite` (docs/contract.md §4).

use std::path::{Path, PathBuf};

/// The database file name inside the data directory.
pub const DB_FILE_NAME: &str = "storage.sqlite";

/// `$DATA_DIR/storage.sqlite`; without `DATA_DIR` the host's default data directory:
/// `~/.omniroute`, or `$XDG_CONFIG_HOME/omniroute` when `XDG_CONFIG_HOME` is set and
/// `~/.omniroute` does not exist. `env` reads one environment variable (`std::env::var`
/// in production, a map in tests); empty values count as unset. Resolved when the
/// database is opened, never at load time. The parent directory is created by
/// [`super::SqliteDb::open`], not here.
pub fn default_db_path(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
  let var = |name: &str| env(name).filter(|v| !v.is_empty());
  if let Some(dir) = var("DATA_DIR") {
    return PathBuf::from(dir).join(DB_FILE_NAME);
  }
  let home = var("HOME")
    .or_else(|| var("USERPROFILE"))
    .map(PathBuf::from)
    .or_else(home_dir_fallback)
    .unwrap_or_else(|| PathBuf::from("."));
  let legacy = home.join(".omniroute");
  match var("XDG_CONFIG_HOME") {
    Some(xdg) if !exists(&legacy) => PathBuf::from(xdg).join("omniroute").join(DB_FILE_NAME),
    _ => legacy.join(DB_FILE_NAME),
  }
}

#[allow(deprecated)]
fn home_dir_fallback() -> Option<PathBuf> {
  std::env::home_dir()
}

/// `stat` only: nothing is opened (an open and close of the host's files would drop its
/// locks; a directory is harmless, but keep the habit).
fn exists(path: &Path) -> bool {
  std::fs::metadata(path).is_ok()
}

#[cfg(test)]
mod tests {
  use super::*;
  use std::collections::HashMap;

  fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
      .iter()
      .map(|(k, v)| (k.to_string(), v.to_string()))
      .collect();
    move |k| map.get(k).cloned()
  }

  #[test]
  fn data_dir_then_home_or_xdg() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let home_s = home.to_str().unwrap();
    let env = env_of(&[
      ("HOME", home_s),
      ("XDG_CONFIG_HOME", "/xdg"),
      ("DATA_DIR", ""),
    ]);
    let data_dir = env_of(&[
      ("DATA_DIR", "/data"),
      ("HOME", home_s),
      ("XDG_CONFIG_HOME", "/x"),
    ]);
    assert_eq!(
      default_db_path(&data_dir),
      PathBuf::from("/data/storage.sqlite")
    );
    // ~/.omniroute missing and XDG set: the XDG folder.
    assert_eq!(
      default_db_path(&env),
      PathBuf::from("/xdg/omniroute/storage.sqlite")
    );
    // ~/.omniroute present: it wins.
    std::fs::create_dir_all(home.join(".omniroute")).unwrap();
    assert_eq!(
      default_db_path(&env),
      home.join(".omniroute").join("storage.sqlite")
    );
    // No XDG: ~/.omniroute.
    let env = env_of(&[("HOME", home_s)]);
    assert_eq!(
      default_db_path(&env),
      home.join(".omniroute").join("storage.sqlite")
    );
  }
}
