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
//!   locks now conflict like two processes' locks do. `l_pid` is zeroed (SQLite leaves it
//!   uninitialised; Linux rejects OFD requests with a non-zero `l_pid` with `EINVAL`).
//!   Every other command passes through. `errno` is the kernel's. The command numbers
//!   differ by platform — Linux 36/37/38, XNU 92/90/91 for GETLK/SETLK/SETLKW, and the
//!   classic ones too — so the mapping is one function over the platform's table
//!   (`locks/commands.rs`), whose tests check both tables.
//! - `close`: a descriptor of a regular file that another descriptor of this process still
//!   has open (the host's connection) is *parked* rather than closed — its OFD locks are
//!   released, the descriptor stays open — because closing it would drop every classic lock
//!   the host holds on that file. Parked descriptors are closed by [`sweep_parked`] once no
//!   other descriptor of the process refers to their file (listed from `/proc/self/fd` on
//!   Linux, `/dev/fd` on macOS). `-wal` and `-journal` files are never locked by SQLite
//!   and are closed normally.
//! - `munmap`: counted, then done. The hot path keeps a pointer to the wal-index header
//!   (`wal_index.rs`) and uses it only while this count has not moved, so a region SQLite
//!   unmapped (when its last connection to a file lets go of the wal-index) is never read.
//!
//! When SQLite closes the database or `-shm` descriptor (read in SQLite 3.54.1's unix VFS):
//! `sqlite3_close` (pager close and `unixShmPurge` when the last connection unmaps the
//! wal-index); opening the `-shm` when another process holds the DMS byte exclusively (it
//! is rebuilding the wal-index) — `unixLockSharedMemory` returns `SQLITE_BUSY`,
//! `unixOpenSharedMemory` jumps to `shm_open_err` and `unixShmPurge` closes the `-shm`,
//! and SQLite retries, reopening it; failing to open the WAL (`walIndexClose`);
//! `fstat` failing in `unixOpen`; and leaving WAL mode. The engine keeps one connection for
//! the life of the process, never leaves WAL mode, and the close hook covers the rest.
//!
//! The hooks live in the aSyscall table of the engine's own SQLite copy: this crate links
//! SQLite statically (`rusqlite` feature `bundled`) and a `cdylib` exports no `sqlite3_*`
//! symbol, so the host's copy is untouched. [`self_test`] checks it at open.
//!
//! SQLite calls `fcntl` through a variadic pointer. On x86-64 (Linux and macOS) and Linux
//! AArch64 the variadic third argument arrives where a fixed third parameter is read; on
//! macOS AArch64, Apple's ABI passes it on the stack, and the hook's entry point there has
//! the shape that reads it from there (`ofd_fcntl_stack_arg`).
//!
//! **When OFD locks cannot be had, the engine refuses rather than share the file unsafely.**
//! Before SQLite takes any lock, [`install`] tries OFD locks on a scratch file (an OFD
//! lock through one descriptor must be seen by a classic `F_GETLK` of this process
//! through another); and a kernel that answers an OFD request with `EINVAL` later says the
//! same. Then the `fcntl` hook *refuses*: every request to take a lock fails (`ENOTSUP`,
//! an I/O error to SQLite); releases go through as OFD releases, which free only the
//! engine's own OFD locks, never the host's classic ones; queries are answered classically
//! (they change nothing; macOS SQLite's file-system probe needs them, or it would fall back
//! to dot-file locking, invisible to the host). So the engine's SQLite takes no lock, reads
//! and writes no database, releases none of the host's locks: opening fails, calls fail
//! (the hot path fails open), the reason is said once on stderr and kept in
//! [`HookStatus::detail`], and the Redis store is the way to run on such a machine. The
//! close hook stays in (closing would still drop the host's locks), the memory path stays
//! off. If the open-time [`self_test`] finds the locks not live, the memory path is turned
//! off for the process, the open report says why (once), and — when the hook is being
//! called but the process's classic query does not see the engine's lock — the hook
//! refuses from then on too.
//!
//! Windows: SQLite locks with `LockFileEx`, and those locks belong to the file *handle*:
//! the engine's and the host's locks exclude each other as two processes' would, and closing
//! a handle releases only that handle's locks — no hazard, no hook ([`LockCheck::Unsupported`],
//! no warning). The wal-index is mapped with `MapViewOfFile` and unmapped with
//! `UnmapViewOfFile`, which no hook counts, so the memory path is off there ([`unmaps`] is
//! `None`): every hot-path call reads the database — correct, not as fast.

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
  install, installed, lock_calls, parked_count, probe_shm, self_test, sweep_parked, unmaps,
};
