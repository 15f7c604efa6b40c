//! Locks that cannot hurt the host's SQLite copy (docs/contract.md §4, docs/two-sqlites.md).
//!
//! The host's better-sqlite3 and this crate's bundled SQLite open the same WAL database in
//! one process. Classic POSIX `fcntl` locks belong to the *process*: the engine's copy
//! would not see the host's locks (and rebuild the live wal-index), would release them when
//! unlocking the same byte range, and would drop every one of them by closing any
//! descriptor of the file. So, on Linux (x86-64 and AArch64) and macOS (x86-64 and
//! AArch64), before the engine's first open, three of the unix VFS's system calls are
//! replaced in the engine's copy only (`locks/hooks.rs`, one implementation for both):
//!
//! - `fcntl`: `F_GETLK`/`F_SETLK`/`F_SETLKW` become the open-file-description variants
//!   (`F_OFD_*`), which belong to the descriptor: the host's classic locks and the engine's
//!   conflict like two processes' do. `l_pid` is zeroed (SQLite leaves it uninitialised;
//!   Linux answers `EINVAL` otherwise); other commands pass through; `errno` is the
//!   kernel's. The numbers differ by platform (`locks/commands.rs` has both tables).
//! - `close`: a descriptor of a regular file that another descriptor of this process has
//!   open (the host's connection) is *parked*, its OFD locks released, not closed: closing
//!   it would drop every classic lock the host holds on that file. [`sweep_parked`] closes
//!   it once no other descriptor refers to its file (`/proc/self/fd`, macOS `/dev/fd`).
//!   `-wal` and `-journal` are never locked by SQLite and are closed normally.
//! - `munmap`: counted, then done. The hot path keeps a pointer to the wal-index header
//!   (`wal_index.rs`) and uses it only while this count has not moved, so a region SQLite
//!   unmapped (when its last connection to a file lets go of the wal-index) is never read.
//!
//! SQLite closes the database or `-shm` descriptor at `sqlite3_close`, when the last
//! connection unmaps the wal-index, when a `-shm` open meets another process rebuilding it
//! (and retries), and on a few failures (3.54.1's unix VFS): the close hook covers them all.
//!
//! The hooks live in the engine's own SQLite copy (`rusqlite` `bundled`, statically linked;
//! the `cdylib` exports no `sqlite3_*` symbol), so the host's copy is untouched;
//! [`self_test`] checks them at open. SQLite calls `fcntl` through a variadic pointer: on
//! x86-64 and Linux AArch64 the third argument arrives where a fixed parameter is read;
//! macOS AArch64 passes it on the stack (`ofd_fcntl_stack_arg`).
//!
//! **When OFD locks cannot be had, the engine refuses rather than share the file unsafely.**
//! [`install`] tries them on a scratch file first (an OFD lock must be seen by a classic
//! `F_GETLK` through another descriptor), and an `EINVAL` later says the same. Then the
//! hook takes no lock (`ENOTSUP`, an I/O error to SQLite), passes releases as OFD releases
//! (never freeing the host's classic locks) and answers queries classically (macOS SQLite's
//! file-system probe needs them). Opening and calls fail (the hot path fails open), the
//! reason is said once and kept in [`HookStatus::detail`]; the Redis store is the way to run
//! there. A [`self_test`] that finds the locks not live turns the memory path off, and makes
//! the hook refuse when the process's classic query does not see the engine's lock.
//!
//! Windows: `LockFileEx` locks belong to the handle, so the two copies exclude each other
//! as two processes would: no hazard, no hook ([`LockCheck::Unsupported`]). No hook counts
//! `UnmapViewOfFile` either, so the memory path is off there ([`unmaps`] is `None`).

/// Whether the hooks are installed in this process's bundled SQLite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookStatus {
  /// `fcntl` is replaced and maps: the engine's locks are OFD locks (not when it refuses).
  pub fcntl: bool,
  /// `close` is replaced: descriptors the host still has open are parked, not closed.
  pub close: bool,
  /// Why a hook is missing or refusing, when one is.
  pub detail: Option<String>,
}

/// What the open-time self-test found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockCheck {
  /// The hook ran for the engine's first statements, and a classic `F_GETLK` from this
  /// process sees the engine's lock on the `-shm` (classic locks of the process itself
  /// would be invisible to it).
  Live,
  /// The hook ran, but the `-shm` probe could not be made (no `/proc`, no `-shm` yet), or
  /// the connection's file was replaced at its path while it was opened.
  LiveUnprobed,
  /// The hook is not in effect: the engine's locks are the process's classic locks.
  NotLive(String),
  /// No hook on this platform (see the module documentation).
  Unsupported,
}

impl LockCheck {
  /// `Live` or `LiveUnprobed`.
  pub fn is_live(&self) -> bool {
    matches!(self, LockCheck::Live | LockCheck::LiveUnprobed)
  }
}

#[cfg(any(
  test,
  target_os = "macos",
  all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
  )
))]
mod commands;

#[cfg(any(
  target_os = "macos",
  all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
  )
))]
#[path = "locks/hooks.rs"]
mod imp;

#[cfg(not(any(
  target_os = "macos",
  all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
  )
)))]
mod imp {
  use super::{HookStatus, LockCheck};
  use std::path::Path;

  fn status() -> HookStatus {
    HookStatus {
      fcntl: false,
      close: false,
      detail: Some("no lock hook on this platform".into()),
    }
  }

  pub fn install() -> HookStatus {
    status()
  }

  pub fn installed() -> Option<HookStatus> {
    Some(status())
  }

  pub fn lock_calls() -> u64 {
    0
  }

  pub fn unmaps() -> Option<u64> {
    None
  }

  pub fn probe_shm(_db_path: &Path) -> Option<bool> {
    None
  }

  pub fn open_elsewhere(_id: (u64, u64)) -> Option<bool> {
    None
  }

  pub fn read_head<const N: usize>(_id: (u64, u64)) -> Option<[u8; N]> {
    None
  }

  pub fn self_test(_path: &Path, _calls: u64, _at_path: impl Fn() -> bool) -> LockCheck {
    LockCheck::Unsupported
  }

  pub fn parked_count() -> usize {
    0
  }

  pub fn sweep_parked() -> usize {
    0
  }
}

pub use imp::{
  install, installed, lock_calls, open_elsewhere, parked_count, probe_shm, read_head, self_test,
  sweep_parked, unmaps,
};
