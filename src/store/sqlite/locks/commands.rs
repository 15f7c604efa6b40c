//! Which `fcntl` commands the lock hook rewrites, as data: one table per platform, one
//! function that reads it. The classic record-lock commands and their open-file-description
//! twins have different numbers on Linux and on macOS (XNU) — Darwin's classic `F_SETLKW`
//! is 9, Linux's is 7, and 7 is Darwin's `F_GETLK` — so the mapping is only right with the
//! table of the platform it runs on. Both tables are compiled into the unit tests, which run
//! on Linux, so the macOS table is checked there too; each platform's build also checks its
//! own table against its `libc` at compile time.

use libc::c_int;

/// The three classic record-lock commands of a platform and their OFD twins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LockCommands {
  pub getlk: c_int,
  pub setlk: c_int,
  pub setlkw: c_int,
  pub ofd_getlk: c_int,
  pub ofd_setlk: c_int,
  pub ofd_setlkw: c_int,
}

/// Linux on x86-64 and AArch64, glibc and musl alike (`asm-generic/fcntl.h`; OFD locks
/// since Linux 3.15).
#[cfg(any(test, target_os = "linux"))]
pub(crate) const LINUX: LockCommands = LockCommands {
  getlk: 5,
  setlk: 6,
  setlkw: 7,
  ofd_getlk: 36,
  ofd_setlk: 37,
  ofd_setlkw: 38,
};

/// macOS (XNU `bsd/sys/fcntl.h`): `F_OFD_SETLK` 90, `F_OFD_SETLKW` 91, `F_OFD_GETLK` 92,
/// the numbers ncruces/go-sqlite3's `vfs/os_darwin.go` locks with.
#[cfg(any(test, target_os = "macos"))]
pub(crate) const DARWIN: LockCommands = LockCommands {
  getlk: 7,
  setlk: 8,
  setlkw: 9,
  ofd_getlk: 92,
  ofd_setlk: 90,
  ofd_setlkw: 91,
};

#[cfg(target_os = "linux")]
const _: () = assert!(
  LINUX.getlk == libc::F_GETLK
    && LINUX.setlk == libc::F_SETLK
    && LINUX.setlkw == libc::F_SETLKW
    && LINUX.ofd_getlk == libc::F_OFD_GETLK
    && LINUX.ofd_setlk == libc::F_OFD_SETLK
    && LINUX.ofd_setlkw == libc::F_OFD_SETLKW
);

#[cfg(target_os = "macos")]
const _: () = assert!(
  DARWIN.getlk == libc::F_GETLK
    && DARWIN.setlk == libc::F_SETLK
    && DARWIN.setlkw == libc::F_SETLKW
    && DARWIN.ofd_getlk == libc::F_OFD_GETLK
    && DARWIN.ofd_setlk == libc::F_OFD_SETLK
    && DARWIN.ofd_setlkw == libc::F_OFD_SETLKW
);

impl LockCommands {
  /// The OFD twin of a classic record-lock command, or `None` for every other command
  /// (which the hook passes through unchanged).
  pub(crate) fn ofd(&self, cmd: c_int) -> Option<c_int> {
    [
      (self.getlk, self.ofd_getlk),
      (self.setlk, self.ofd_setlk),
      (self.setlkw, self.ofd_setlkw),
    ]
    .into_iter()
    .find_map(|(classic, ofd)| (classic == cmd).then_some(ofd))
  }

  /// Whether `cmd` only asks (`F_GETLK`), as opposed to setting or releasing a lock.
  pub(crate) fn is_query(&self, cmd: c_int) -> bool {
    cmd == self.getlk
  }
}

#[cfg(test)]
mod tests {
  use super::*;

  fn maps_each_lock_command(table: LockCommands) {
    assert_eq!(table.ofd(table.getlk), Some(table.ofd_getlk));
    assert_eq!(table.ofd(table.setlk), Some(table.ofd_setlk));
    assert_eq!(table.ofd(table.setlkw), Some(table.ofd_setlkw));
    assert!(table.is_query(table.getlk));
    assert!(!table.is_query(table.setlk) && !table.is_query(table.setlkw));
    // The OFD commands themselves are not rewritten again.
    for ofd in [table.ofd_getlk, table.ofd_setlk, table.ofd_setlkw] {
      assert_eq!(table.ofd(ofd), None, "{ofd}");
    }
  }

  #[test]
  fn each_platform_maps_its_three_lock_commands() {
    let linux = [(5, 36), (6, 37), (7, 38)];
    for (table, mapped) in [(LINUX, linux), (DARWIN, [(7, 92), (8, 90), (9, 91)])] {
      maps_each_lock_command(table);
      for (classic, ofd) in mapped {
        assert_eq!(table.ofd(classic), Some(ofd), "{classic}");
      }
    }
  }

  #[test]
  fn every_other_command_passes_through() {
    // F_DUPFD 0, F_GETFD 1, F_SETFD 2, F_GETFL 3, F_SETFL 4 on both; Darwin's F_GETPATH 50,
    // F_FULLFSYNC 51, F_BARRIERFSYNC 85; Linux's F_DUPFD_CLOEXEC 1030.
    for cmd in [0, 1, 2, 3, 4, 50, 51, 85, 1030] {
      assert_eq!(LINUX.ofd(cmd), None, "linux {cmd}");
      assert_eq!(DARWIN.ofd(cmd), None, "darwin {cmd}");
    }
    // Linux's 5 and 6 (F_GETLK, F_SETLK) are F_GETOWN and F_SETOWN on Darwin.
    assert_eq!(DARWIN.ofd(5), None);
    assert_eq!(DARWIN.ofd(6), None);
    // Darwin's 8 and 9 (F_SETLK, F_SETLKW) are F_SETOWN and F_GETOWN on Linux.
    assert_eq!(LINUX.ofd(8), None);
    assert_eq!(LINUX.ofd(9), None);
  }

  #[test]
  fn the_table_must_be_the_platforms_own() {
    // 7 is Linux's F_SETLKW but Darwin's F_GETLK: the same number becomes a blocking lock
    // on one and a query on the other.
    assert_eq!(LINUX.ofd(7), Some(LINUX.ofd_setlkw));
    assert_eq!(DARWIN.ofd(7), Some(DARWIN.ofd_getlk));
    assert!(!LINUX.is_query(7) && DARWIN.is_query(7));
  }
}
