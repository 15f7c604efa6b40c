//! Locks that cannot hurt the host's SQLite copy (docs/contract.md §4, docs/two-sqlites.md).
//!
//! The host's better-sqlite3 and this crate's bundled SQLite open the same WAL database in
//! one process. Classic POSIX `fcntl` locks belong to the *process*: the engine's copy
//! would not see the host's locks (and rebuild the live wal-index), would release them when
//! unlocking the same byte range, and would drop every one of them by closing any
//! descriptor of the file. So, on Linux (x86-64 and AArch64), before the engine's first
//! open, three of the unix VFS's system calls are replaced in the engine's copy only:
//!
//! - `fcntl`: `F_GETLK`/`F_SETLK`/`F_SETLKW` become the open-file-description variants
//!   (`F_OFD_*`), which belong to the descriptor: the host's classic locks and the engine's
//!   locks now conflict like two processes' locks do. `l_pid` is zeroed (SQLite leaves it
//!   uninitialised; OFD requests with a non-zero `l_pid` fail with `EINVAL`). Every other
//!   command passes through. `errno` is the kernel's.
//! - `close`: a descriptor of a regular file that another descriptor of this process still
//!   has open (the host's connection) is *parked* rather than closed — its OFD locks are
//!   released, the descriptor stays open — because closing it would drop every classic lock
//!   the host holds on that file. Parked descriptors are closed by [`sweep_parked`] once no
//!   other descriptor of the process refers to their file. `-wal` and `-journal` files are
//!   never locked by SQLite and are closed normally.
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
//! Other platforms: no hook. macOS has no public OFD locks (the hazard remains there);
//! Windows locks belong to handles (no hazard).

use std::path::Path;

/// Whether the hooks are installed in this process's bundled SQLite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookStatus {
  /// `fcntl` is replaced: the engine's locks are OFD locks.
  pub fcntl: bool,
  /// `close` is replaced: descriptors the host still has open are parked, not closed.
  pub close: bool,
  /// Why a hook is missing, when one is.
  pub detail: Option<String>,
}

/// What the open-time self-test found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockCheck {
  /// The hook ran for the engine's first statements, and a classic `F_GETLK` from this
  /// process sees the engine's lock on the `-shm` (classic locks of the process itself
  /// would be invisible to it).
  Live,
  /// The hook ran, but the `-shm` probe could not be made (no `/proc`, no `-shm` yet).
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

#[cfg(all(
  target_os = "linux",
  any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod imp {
  use super::{HookStatus, LockCheck};
  use libc::{c_int, c_void};
  use rusqlite::ffi;
  use std::path::Path;
  use std::sync::atomic::{AtomicU64, Ordering};
  use std::sync::{Mutex, OnceLock};

  /// Lock requests the `fcntl` hook has mapped to OFD requests.
  static LOCK_CALLS: AtomicU64 = AtomicU64::new(0);
  /// `munmap` calls of the engine's SQLite copy so far; `u64::MAX` until the hook is in.
  static UNMAPS: AtomicU64 = AtomicU64::new(u64::MAX);
  static STATUS: OnceLock<HookStatus> = OnceLock::new();
  static PARKED: Mutex<Vec<Parked>> = Mutex::new(Vec::new());

  type FcntlFn = extern "C" fn(c_int, c_int, *mut c_void) -> c_int;
  type CloseFn = extern "C" fn(c_int) -> c_int;
  type MunmapFn = extern "C" fn(*mut c_void, libc::size_t) -> c_int;

  #[derive(Debug, Clone, Copy)]
  struct Parked {
    fd: c_int,
    dev: u64,
    ino: u64,
  }

  /// SQLite calls `fcntl` through a variadic pointer; on x86-64 and AArch64 Linux the
  /// third argument arrives in the same register as this fixed parameter.
  extern "C" fn ofd_fcntl(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    let ofd = match cmd {
      libc::F_GETLK => libc::F_OFD_GETLK,
      libc::F_SETLK => libc::F_OFD_SETLK,
      libc::F_SETLKW => libc::F_OFD_SETLKW,
      // SAFETY: forwarded unchanged, as SQLite passed it.
      _ => return unsafe { libc::fcntl(fd, cmd, arg) },
    };
    if !arg.is_null() {
      // SAFETY: for the lock commands SQLite passes a `struct flock *`.
      unsafe { (*arg.cast::<libc::flock>()).l_pid = 0 };
    }
    LOCK_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: same descriptor and struct; errno is the kernel's, untouched after this.
    unsafe { libc::fcntl(fd, ofd, arg) }
  }

  extern "C" fn parking_close(fd: c_int) -> c_int {
    if let Some((dev, ino)) = must_park(fd) {
      release_ofd_locks(fd);
      lock_parked().push(Parked { fd, dev, ino });
      return 0;
    }
    // SAFETY: SQLite owns `fd` and is closing it.
    unsafe { libc::close(fd) }
  }

  /// Counts, before unmapping, so a pointer into the wal-index taken before the count
  /// changed is known to be stale (see `wal_index.rs`).
  extern "C" fn counting_munmap(addr: *mut c_void, len: libc::size_t) -> c_int {
    UNMAPS.fetch_add(1, Ordering::AcqRel);
    // SAFETY: SQLite unmaps a region it mapped, as it asked.
    unsafe { libc::munmap(addr, len) }
  }

  pub fn unmaps() -> Option<u64> {
    let count = UNMAPS.load(Ordering::Acquire);
    (count != u64::MAX).then_some(count)
  }

  fn lock_parked() -> std::sync::MutexGuard<'static, Vec<Parked>> {
    PARKED.lock().unwrap_or_else(|e| e.into_inner())
  }

  fn release_ofd_locks(fd: c_int) {
    // SAFETY: a zeroed flock is valid; F_UNLCK over the whole file.
    unsafe {
      let mut fl: libc::flock = std::mem::zeroed();
      fl.l_type = libc::F_UNLCK as libc::c_short;
      fl.l_whence = libc::SEEK_SET as libc::c_short;
      libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl);
    }
  }

  fn file_id(fd: c_int) -> Option<(u64, u64, u32)> {
    // SAFETY: fstat writes into a zeroed stat buffer.
    unsafe {
      let mut st: libc::stat = std::mem::zeroed();
      (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino, st.st_mode))
    }
  }

  /// Descriptor numbers of this process, from `/proc/self/fd`.
  fn open_fds() -> Option<Vec<c_int>> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some(
      entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect(),
    )
  }

  /// Whether a descriptor other than `except` and the parked ones refers to `(dev, ino)`.
  fn other_user(dev: u64, ino: u64, except: c_int, parked: &[Parked]) -> Option<bool> {
    let fds = open_fds()?;
    Some(fds.into_iter().any(|n| {
      n != except
        && !parked.iter().any(|p| p.fd == n)
        && matches!(file_id(n), Some((d, i, _)) if d == dev && i == ino)
    }))
  }

  fn must_park(fd: c_int) -> Option<(u64, u64)> {
    let (dev, ino, mode) = file_id(fd)?;
    if mode & libc::S_IFMT != libc::S_IFREG {
      return None;
    }
    if let Ok(target) = std::fs::read_link(format!("/proc/self/fd/{fd}")) {
      let target = target.to_string_lossy();
      let target = target.trim_end_matches(" (deleted)");
      if target.ends_with("-wal") || target.ends_with("-journal") {
        return None;
      }
    }
    let parked = lock_parked();
    other_user(dev, ino, fd, &parked)?.then_some((dev, ino))
  }

  pub fn install() -> HookStatus {
    STATUS.get_or_init(install_once).clone()
  }

  pub fn installed() -> Option<HookStatus> {
    STATUS.get().cloned()
  }

  fn install_once() -> HookStatus {
    let failed = |detail: String| HookStatus {
      fcntl: false,
      close: false,
      detail: Some(detail),
    };
    // SAFETY: plain C API calls; the pointers come from SQLite itself.
    unsafe {
      if ffi::sqlite3_libversion_number() != ffi::SQLITE_VERSION_NUMBER {
        return failed(format!(
          "the SQLite library in use ({}) is not the bundled one ({})",
          ffi::sqlite3_libversion_number(),
          ffi::SQLITE_VERSION_NUMBER
        ));
      }
      let vfs = ffi::sqlite3_vfs_find(std::ptr::null());
      if vfs.is_null() {
        return failed("no default SQLite VFS".into());
      }
      let name = std::ffi::CStr::from_ptr((*vfs).zName)
        .to_string_lossy()
        .into_owned();
      let Some(set) = (*vfs).xSetSystemCall else {
        return failed(format!("VFS {name:?} cannot replace system calls"));
      };
      let fcntl_hook: FcntlFn = ofd_fcntl;
      let close_hook: CloseFn = parking_close;
      let fcntl_rc = set(
        vfs,
        c"fcntl".as_ptr(),
        Some(std::mem::transmute::<FcntlFn, unsafe extern "C" fn()>(
          fcntl_hook,
        )),
      );
      let close_rc = if fcntl_rc == ffi::SQLITE_OK {
        set(
          vfs,
          c"close".as_ptr(),
          Some(std::mem::transmute::<CloseFn, unsafe extern "C" fn()>(
            close_hook,
          )),
        )
      } else {
        fcntl_rc
      };
      let fcntl = fcntl_rc == ffi::SQLITE_OK;
      let close = fcntl && close_rc == ffi::SQLITE_OK;
      let munmap_hook: MunmapFn = counting_munmap;
      let munmap_rc = set(
        vfs,
        c"munmap".as_ptr(),
        Some(std::mem::transmute::<MunmapFn, unsafe extern "C" fn()>(
          munmap_hook,
        )),
      );
      // Reading the wal-index from memory relies on the OFD locks too (the engine's
      // SHARED lock keeps the host from rebuilding the wal-index under it): count unmaps,
      // which turns that path on, only when every hook is in.
      if munmap_rc == ffi::SQLITE_OK && close {
        UNMAPS.store(0, Ordering::Release);
      }
      HookStatus {
        fcntl,
        close,
        detail: (!close).then(|| {
          format!("xSetSystemCall on VFS {name:?}: fcntl rc {fcntl_rc}, close rc {close_rc}")
        }),
      }
    }
  }

  pub fn lock_calls() -> u64 {
    LOCK_CALLS.load(Ordering::Relaxed)
  }

  /// Finds this process's descriptor of `<db>-shm` and asks, with a classic `F_GETLK`,
  /// whether a write lock on the DMS byte (128) would conflict. The engine holds a shared
  /// lock there while connected: a classic query from the same process sees it only if it
  /// is not one of the process's own classic locks.
  pub fn probe_shm(db_path: &Path) -> Option<bool> {
    let db = std::fs::canonicalize(db_path).ok()?;
    let mut shm = db.into_os_string();
    shm.push("-shm");
    let fd = open_fds()?.into_iter().find(|n| {
      std::fs::read_link(format!("/proc/self/fd/{n}")).is_ok_and(|t| t.as_os_str() == shm)
    })?;
    // SAFETY: a classic F_GETLK on our own descriptor; nothing is locked or closed.
    unsafe {
      let mut fl: libc::flock = std::mem::zeroed();
      fl.l_type = libc::F_WRLCK as libc::c_short;
      fl.l_whence = libc::SEEK_SET as libc::c_short;
      fl.l_start = 128;
      fl.l_len = 1;
      if libc::fcntl(fd, libc::F_GETLK, &mut fl) != 0 {
        return None;
      }
      Some(fl.l_type != libc::F_UNLCK as libc::c_short)
    }
  }

  pub fn self_test(db_path: &Path, calls_before: u64) -> LockCheck {
    match installed() {
      Some(status) if status.fcntl => {}
      Some(status) => return LockCheck::NotLive(status.detail.unwrap_or_default()),
      None => return LockCheck::NotLive("the hook was never installed".into()),
    }
    if lock_calls() == calls_before {
      return LockCheck::NotLive(
        "the fcntl hook was not called while the database was opened".into(),
      );
    }
    match probe_shm(db_path) {
      Some(true) => LockCheck::Live,
      Some(false) => LockCheck::NotLive(
        "a classic F_GETLK from this process does not see the engine's -shm lock".into(),
      ),
      None => LockCheck::LiveUnprobed,
    }
  }

  pub fn parked_count() -> usize {
    lock_parked().len()
  }

  pub fn sweep_parked() -> usize {
    let mut parked = lock_parked();
    let mut closed = 0;
    let mut i = 0;
    while i < parked.len() {
      let p = parked[i];
      match file_id(p.fd) {
        // The number now names another file (or nothing): not ours any more.
        Some((dev, ino, _)) if dev == p.dev && ino == p.ino => {}
        _ => {
          parked.swap_remove(i);
          continue;
        }
      }
      if other_user(p.dev, p.ino, p.fd, &parked) == Some(false) {
        // SAFETY: the descriptor is ours (parked) and nothing else in the process uses
        // the file, so no classic lock is dropped by closing it.
        unsafe { libc::close(p.fd) };
        parked.swap_remove(i);
        closed += 1;
      } else {
        i += 1;
      }
    }
    closed
  }
}

#[cfg(not(all(
  target_os = "linux",
  any(target_arch = "x86_64", target_arch = "aarch64")
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

  pub fn self_test(_db_path: &Path, _calls_before: u64) -> LockCheck {
    LockCheck::Unsupported
  }

  pub fn parked_count() -> usize {
    0
  }

  pub fn sweep_parked() -> usize {
    0
  }
}

/// Installs the hooks once per process (idempotent). Must run before the first connection
/// of the bundled SQLite is opened — [`super::SqliteDb::open`] does it; tests that open a
/// second raw `rusqlite` connection call it first.
pub fn install() -> HookStatus {
  imp::install()
}

/// The installed hooks, or `None` before [`install`].
pub fn installed() -> Option<HookStatus> {
  imp::installed()
}

/// How many lock requests the `fcntl` hook has turned into OFD requests so far.
pub fn lock_calls() -> u64 {
  imp::lock_calls()
}

/// How many times the engine's SQLite copy has unmapped memory (the wal-index regions,
/// when the last connection to a file lets go of them), or `None` when that is not
/// counted on this platform — then no pointer into the wal-index may be kept.
pub fn unmaps() -> Option<u64> {
  imp::unmaps()
}

/// Whether a classic `F_GETLK` from this process sees a lock on the DMS byte of
/// `<db_path>-shm` (through the engine's own `-shm` descriptor; nothing is opened).
/// `None` when it cannot be asked.
pub fn probe_shm(db_path: &Path) -> Option<bool> {
  imp::probe_shm(db_path)
}

/// The open-time self-test: the hook ran since `calls_before` and the `-shm` probe sees the
/// engine's lock.
pub fn self_test(db_path: &Path, calls_before: u64) -> LockCheck {
  imp::self_test(db_path, calls_before)
}

/// Descriptors kept open by the close hook.
pub fn parked_count() -> usize {
  imp::parked_count()
}

/// Closes parked descriptors whose file no other descriptor of the process refers to any
/// more; returns how many were closed.
pub fn sweep_parked() -> usize {
  imp::sweep_parked()
}
