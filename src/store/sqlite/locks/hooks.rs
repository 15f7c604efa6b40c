//! The hooks themselves (see `locks.rs` for what they do and why), one implementation for
//! Linux and macOS. What differs between the two is in `os` below: the table of `fcntl`
//! commands, where the process's descriptors are listed, how a descriptor's path is read,
//! and how `errno` is set — plus, on macOS AArch64, the shape of the `fcntl` entry point.

use super::commands::LockCommands;
use super::{HookStatus, LockCheck};
use libc::{c_int, c_void};
use rusqlite::ffi;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

#[cfg(target_os = "linux")]
mod os {
  use libc::c_int;
  use std::path::PathBuf;

  pub const COMMANDS: super::LockCommands = super::super::commands::LINUX;
  /// One entry per open descriptor of this process.
  pub const FD_DIR: &str = "/proc/self/fd";

  pub fn fd_path(fd: c_int) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()
  }

  pub fn set_errno(value: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = value };
  }
}

#[cfg(target_os = "macos")]
mod os {
  use libc::c_int;
  use std::ffi::{CStr, OsStr};
  use std::os::unix::ffi::OsStrExt;
  use std::path::PathBuf;

  pub const COMMANDS: super::LockCommands = super::super::commands::DARWIN;
  /// One entry per open descriptor of this process (devfs' fdesc; macOS has no /proc).
  pub const FD_DIR: &str = "/dev/fd";

  pub fn fd_path(fd: c_int) -> Option<PathBuf> {
    let mut buf = [0 as libc::c_char; libc::MAXPATHLEN as usize];
    // SAFETY: F_GETPATH writes a NUL-terminated path of at most MAXPATHLEN bytes.
    if unsafe { libc::fcntl(fd, libc::F_GETPATH, buf.as_mut_ptr()) } == -1 {
      return None;
    }
    // SAFETY: NUL-terminated by the kernel, within `buf`.
    let path = unsafe { CStr::from_ptr(buf.as_ptr()) };
    Some(PathBuf::from(OsStr::from_bytes(path.to_bytes())))
  }

  pub fn set_errno(value: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__error() = value };
  }
}

/// The `fcntl` hook's state: the platform's command table, whether it refuses every lock
/// request (and why), and how many it has turned into OFD requests.
pub(super) struct FcntlHook {
  commands: LockCommands,
  refusing: AtomicBool,
  refusal: OnceLock<String>,
  calls: AtomicU64,
  /// Whether refusing is announced on stderr (the process's hook; not the tests' own).
  announce: bool,
}

impl FcntlHook {
  pub(super) const fn new(commands: LockCommands, announce: bool) -> FcntlHook {
    FcntlHook {
      commands,
      refusing: AtomicBool::new(false),
      refusal: OnceLock::new(),
      calls: AtomicU64::new(0),
      announce,
    }
  }

  /// One `fcntl` call of SQLite: the three classic lock commands become their OFD twins
  /// (`l_pid` zeroed: SQLite leaves it uninitialised, and Linux rejects OFD requests with a
  /// non-zero one); every other command passes through; `errno` is the kernel's.
  pub(super) fn call(&self, fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    let Some(ofd) = self.commands.ofd(cmd) else {
      // SAFETY: forwarded unchanged, as SQLite passed it.
      return unsafe { libc::fcntl(fd, cmd, arg) };
    };
    if self.refusing.load(Ordering::Acquire) {
      return self.refused(fd, cmd, arg);
    }
    if !arg.is_null() {
      // SAFETY: for the lock commands SQLite passes a `struct flock *`.
      unsafe { (*arg.cast::<libc::flock>()).l_pid = 0 };
    }
    self.calls.fetch_add(1, Ordering::Relaxed);
    // SAFETY: same descriptor and struct.
    let rc = unsafe { libc::fcntl(fd, ofd, arg) };
    if rc == -1 && !arg.is_null() && last_errno() == libc::EINVAL {
      // SQLite's requests are well formed: EINVAL here is a kernel that does not know the
      // command. Falling back to the classic command would be the unsafe case itself.
      self.refuse(format!(
        "F_OFD_* command {ofd} failed with EINVAL: this kernel has no open-file-description locks"
      ));
      return self.refused(fd, cmd, arg);
    }
    rc
  }

  /// A lock request while refusing. A query (`F_GETLK`) is answered by the classic
  /// command: it takes and releases nothing, and SQLite's file-system probe on macOS
  /// (`autolockIoFinder`) needs it to succeed, or it would switch to dot-file locking,
  /// which the host's copy would not see at all. A release goes through as an OFD release,
  /// which frees only this descriptor's own OFD locks (held from before the refusal) and
  /// never a classic lock of the host's; where the kernel has no OFD commands there is
  /// nothing to release. Taking a lock fails with `ENOTSUP`, which SQLite reports as an
  /// I/O error: the engine's SQLite takes no lock, so it reads and writes nothing.
  fn refused(&self, fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    if self.commands.is_query(cmd) {
      // SAFETY: a classic query on SQLite's own descriptor and struct; nothing changes.
      return unsafe { libc::fcntl(fd, cmd, arg) };
    }
    // SAFETY: for the lock commands SQLite passes a `struct flock *`.
    let releases = !arg.is_null()
      && unsafe { (*arg.cast::<libc::flock>()).l_type } == libc::F_UNLCK as libc::c_short;
    if releases {
      if let Some(ofd) = self.commands.ofd(cmd) {
        // SAFETY: as in `call`; l_pid zeroed for the same reason.
        let rc = unsafe {
          (*arg.cast::<libc::flock>()).l_pid = 0;
          libc::fcntl(fd, ofd, arg)
        };
        return if rc == -1 && last_errno() == libc::EINVAL {
          0
        } else {
          rc
        };
      }
    }
    os::set_errno(libc::ENOTSUP);
    -1
  }

  /// From now on, every lock request is refused; the first reason is kept (and said once
  /// on stderr by the process's hook, unless `quiet`).
  pub(super) fn refuse_with(&self, why: String, quiet: bool) {
    let first = self.refusal.set(why).is_ok();
    self.refusing.store(true, Ordering::Release);
    if first && self.announce && !quiet {
      eprintln!(
        "quota-engine: {}",
        refusal_detail(self.refusal().unwrap_or_default())
      );
    }
  }

  fn refuse(&self, why: String) {
    self.refuse_with(why, false);
  }

  pub(super) fn refusal(&self) -> Option<&str> {
    self.refusal.get().map(String::as_str)
  }

  pub(super) fn calls(&self) -> u64 {
    self.calls.load(Ordering::Relaxed)
  }
}

/// What refusing means, for the hook status and the one stderr line.
fn refusal_detail(why: &str) -> String {
  format!(
    "{why}; the engine's SQLite takes no lock in this process, so it opens no database here \
     (its calls fail with a disk I/O error) rather than share the host's file with locks \
     the host's SQLite cannot see; use the Redis store (QUOTA_STORE_DRIVER=redis) on this machine"
  )
}

fn last_errno() -> c_int {
  std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

// These stay process-wide statics (not engine or driver state): the hooks patch the unix VFS
// of the one SQLite copy this process links, which every connection of the process shares.
/// The process's `fcntl` hook.
static FCNTL: FcntlHook = FcntlHook::new(os::COMMANDS, true);
/// `munmap` calls of the engine's SQLite copy so far.
static UNMAPS: AtomicU64 = AtomicU64::new(0);
/// Whether the hot path may keep a pointer into the wal-index: every hook is in, the locks
/// are OFD locks, and no self-test found otherwise.
static MEMORY_PATH: AtomicBool = AtomicBool::new(false);
static STATUS: OnceLock<HookStatus> = OnceLock::new();
static PARKED: Mutex<Vec<Parked>> = Mutex::new(Vec::new());

type CloseFn = extern "C" fn(c_int) -> c_int;
type OpenFn = extern "C" fn(*const libc::c_char, c_int, c_int) -> c_int;
type MunmapFn = extern "C" fn(*mut c_void, libc::size_t) -> c_int;

#[derive(Debug, Clone, Copy)]
struct Parked {
  fd: c_int,
  dev: u64,
  ino: u64,
}

/// The entry point SQLite calls through its variadic `fcntl` pointer where the variadic
/// third argument arrives where a fixed third parameter is read: x86-64 (System V, Linux
/// and macOS: both in `rdx`) and Linux AArch64 (AAPCS64: both in `x2`).
#[cfg_attr(all(target_os = "macos", target_arch = "aarch64"), allow(dead_code))]
extern "C" fn ofd_fcntl(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
  FCNTL.call(fd, cmd, arg)
}

/// The entry point on macOS AArch64, where Apple's arm64 ABI passes every variadic argument
/// on the stack, in 8-byte slots from the first one, while the fixed ones fill `x0`–`x7`.
/// With eight register-sized parameters before it, the pointer is read from that first
/// stack slot, where the caller of the variadic `fcntl` put it; `x2`–`x7` hold nothing.
#[allow(clippy::too_many_arguments)]
#[cfg_attr(
  not(all(target_os = "macos", target_arch = "aarch64")),
  allow(dead_code)
)]
extern "C" fn ofd_fcntl_stack_arg(
  fd: c_int,
  cmd: c_int,
  _x2: usize,
  _x3: usize,
  _x4: usize,
  _x5: usize,
  _x6: usize,
  _x7: usize,
  arg: *mut c_void,
) -> c_int {
  FCNTL.call(fd, cmd, arg)
}

/// The `fcntl` entry point for this platform's calling convention, as SQLite stores it.
fn fcntl_entry() -> unsafe extern "C" fn() {
  #[cfg(all(target_os = "macos", target_arch = "aarch64"))]
  {
    type FcntlStackArgFn =
      extern "C" fn(c_int, c_int, usize, usize, usize, usize, usize, usize, *mut c_void) -> c_int;
    let hook: FcntlStackArgFn = ofd_fcntl_stack_arg;
    // SAFETY: SQLite casts it back to its variadic `fcntl` type before calling it; the
    // parameter list above matches that call under Apple's arm64 ABI.
    unsafe { std::mem::transmute::<FcntlStackArgFn, unsafe extern "C" fn()>(hook) }
  }
  #[cfg(not(all(target_os = "macos", target_arch = "aarch64")))]
  {
    type FcntlFn = extern "C" fn(c_int, c_int, *mut c_void) -> c_int;
    let hook: FcntlFn = ofd_fcntl;
    // SAFETY: as above, under the System V and AAPCS64 conventions.
    unsafe { std::mem::transmute::<FcntlFn, unsafe extern "C" fn()>(hook) }
  }
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

/// SQLite's `open` (`osOpen`, called as `int (*)(const char *, int, int)`): a file the
/// engine parked a descriptor of is opened again through that descriptor, so closing and
/// reopening while the host keeps the file open holds one descriptor per file, not one
/// more each time (docs/two-sqlites.md#parked-descriptors).
extern "C" fn reusing_open(path: *const libc::c_char, flags: c_int, mode: c_int) -> c_int {
  if let Some(fd) = take_parked(path, flags) {
    return fd;
  }
  // SAFETY: SQLite's own arguments, passed on as `open` takes them.
  unsafe { libc::open(path, flags, mode as libc::c_uint) }
}

/// A parked descriptor of the file at `path` opened with the same access mode, taken out
/// of the parked list; none for an exclusive or truncating open.
fn take_parked(path: *const libc::c_char, flags: c_int) -> Option<c_int> {
  use std::os::unix::ffi::OsStrExt;
  use std::os::unix::fs::MetadataExt;
  if path.is_null() || flags & (libc::O_EXCL | libc::O_TRUNC) != 0 {
    return None;
  }
  let mut parked = lock_parked();
  if parked.is_empty() {
    return None;
  }
  // SAFETY: SQLite passes a NUL-terminated path that lives for the call.
  let path = unsafe { std::ffi::CStr::from_ptr(path) };
  let meta = std::fs::metadata(std::ffi::OsStr::from_bytes(path.to_bytes())).ok()?;
  let wanted = flags & libc::O_ACCMODE;
  let at = parked.iter().position(|p| {
    (p.dev, p.ino) == (meta.dev(), meta.ino())
      && matches!(file_id(p.fd), Some((d, i, _)) if (d, i) == (p.dev, p.ino))
      // SAFETY: F_GETFL reads the flags of a descriptor we hold.
      && unsafe { libc::fcntl(p.fd, libc::F_GETFL) } & libc::O_ACCMODE == wanted
  })?;
  Some(parked.swap_remove(at).fd)
}

/// Counts, before unmapping, so a pointer into the wal-index taken before the count
/// changed is known to be stale (see `wal_index.rs`).
extern "C" fn counting_munmap(addr: *mut c_void, len: libc::size_t) -> c_int {
  UNMAPS.fetch_add(1, Ordering::AcqRel);
  // SAFETY: SQLite unmaps a region it mapped, as it asked.
  unsafe { libc::munmap(addr, len) }
}

/// How many times the engine's SQLite copy has unmapped memory (the wal-index regions,
/// when the last connection to a file lets go of them), or `None` when that is not
/// counted on this platform, or the locks are not live (see the module documentation) —
/// then no pointer into the wal-index may be kept.
pub fn unmaps() -> Option<u64> {
  if !MEMORY_PATH.load(Ordering::Acquire) {
    return None;
  }
  Some(UNMAPS.load(Ordering::Acquire))
}

fn lock_parked() -> std::sync::MutexGuard<'static, Vec<Parked>> {
  PARKED.lock().unwrap_or_else(|e| e.into_inner())
}

fn flock(kind: c_int, start: i64, len: i64) -> libc::flock {
  // SAFETY: a zeroed flock is valid.
  let mut fl: libc::flock = unsafe { std::mem::zeroed() };
  fl.l_type = kind as libc::c_short;
  fl.l_whence = libc::SEEK_SET as libc::c_short;
  fl.l_start = start;
  fl.l_len = len;
  fl
}

fn release_ofd_locks(fd: c_int) {
  let mut fl = flock(libc::F_UNLCK as c_int, 0, 0);
  // SAFETY: F_UNLCK over the whole file, on a descriptor SQLite is done with.
  unsafe { libc::fcntl(fd, os::COMMANDS.ofd_setlk, &mut fl) };
}

/// `(st_dev, st_ino, is a regular file)` of a descriptor.
fn file_id(fd: c_int) -> Option<(u64, u64, bool)> {
  // SAFETY: fstat writes into a zeroed stat buffer; a bad descriptor fails with EBADF.
  unsafe {
    let mut st: libc::stat = std::mem::zeroed();
    (libc::fstat(fd, &mut st) == 0).then_some((
      st.st_dev as u64,
      st.st_ino as u64,
      (st.st_mode & libc::S_IFMT) == libc::S_IFREG,
    ))
  }
}

/// Descriptor numbers of this process.
fn open_fds() -> Option<Vec<c_int>> {
  let entries = std::fs::read_dir(os::FD_DIR).ok()?;
  Some(
    entries
      .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
      .collect(),
  )
}

/// Whether a descriptor of this process, not a parked one, refers to the file (or `None`).
pub fn open_elsewhere((dev, ino): (u64, u64)) -> Option<bool> {
  other_user(dev, ino, -1, &lock_parked())
}

/// The first bytes of the file `(dev, ino)`, read through a descriptor of this process
/// that has it open: opening and closing one would drop the host's locks on it.
pub fn read_head<const N: usize>(id: (u64, u64)) -> Option<[u8; N]> {
  let fd = descriptor_on(id)?;
  let mut head = [0u8; N];
  // SAFETY: `head` has N writable bytes, and pread moves no descriptor's offset. One closed
  // and reused since it was found reads another file: a wrong answer, not a fault.
  let read = unsafe { libc::pread(fd, head.as_mut_ptr().cast(), N, 0) };
  (read == N as isize).then_some(head)
}

/// A descriptor of this process on the file `(dev, ino)`, found without opening anything.
fn descriptor_on((dev, ino): (u64, u64)) -> Option<c_int> {
  let same = |fd: &c_int| matches!(file_id(*fd), Some((d, i, _)) if d == dev && i == ino);
  open_fds()?.into_iter().find(same)
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
  let (dev, ino, regular) = file_id(fd)?;
  if !regular {
    return None;
  }
  if let Some(target) = os::fd_path(fd) {
    let target = target.to_string_lossy();
    let target = target.trim_end_matches(" (deleted)");
    if target.ends_with("-wal") || target.ends_with("-journal") {
      return None;
    }
  }
  let parked = lock_parked();
  other_user(dev, ino, fd, &parked)?.then_some((dev, ino))
}

/// What the scratch-file probe of OFD locks found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Probe {
  /// An OFD write lock taken through one descriptor is seen by a classic `F_GETLK` of this
  /// process through another: OFD locks work as the hooks need.
  Works,
  /// They do not (the reason): the kernel does not know the OFD commands, or they act
  /// like the process's own classic locks. The hooks must refuse rather than map.
  Broken(String),
  /// Could not tell (the reason: no scratch file, or a file-system error); the hook's
  /// EINVAL check and the open-time self-test decide.
  Unknown(String),
}

/// Tries OFD locks on a scratch file in `dir` with `commands`, before SQLite locks anything
/// with them. The file is removed at once and its descriptors closed by the probe; closing
/// them drops no lock of the host's (it never had this file open).
pub(super) fn probe_ofd(dir: &Path, commands: &LockCommands) -> Probe {
  use std::os::unix::io::AsRawFd;
  static SEQ: AtomicU64 = AtomicU64::new(0);
  let path = dir.join(format!(
    ".quota-engine-ofd-probe-{}-{}",
    std::process::id(),
    SEQ.fetch_add(1, Ordering::Relaxed)
  ));
  let options = || {
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(true);
    o
  };
  let first = match options().create_new(true).open(&path) {
    Ok(file) => file,
    Err(e) => return Probe::Unknown(format!("no scratch file in {}: {e}", dir.display())),
  };
  let second = options().open(&path);
  let _ = std::fs::remove_file(&path);
  let second = match second {
    Ok(file) => file,
    Err(e) => return Probe::Unknown(format!("reopening the scratch file: {e}")),
  };
  let mut lock = flock(libc::F_WRLCK as c_int, 0, 1);
  // SAFETY: an OFD lock request on our own scratch descriptor.
  if unsafe { libc::fcntl(first.as_raw_fd(), commands.ofd_setlk, &mut lock) } != 0 {
    let err = std::io::Error::last_os_error();
    let why = format!(
      "an F_OFD_SETLK ({}) request failed: {err}",
      commands.ofd_setlk
    );
    // EINVAL: the kernel does not know the command. Anything else (ENOLCK, EOPNOTSUPP, …)
    // may be this scratch folder's file system only, not the database's.
    return if err.raw_os_error() == Some(libc::EINVAL) {
      Probe::Broken(why)
    } else {
      Probe::Unknown(why)
    };
  }
  let mut query = flock(libc::F_WRLCK as c_int, 0, 1);
  // SAFETY: a classic query on our own scratch descriptor; nothing is locked.
  if unsafe { libc::fcntl(second.as_raw_fd(), commands.getlk, &mut query) } != 0 {
    return Probe::Unknown(format!(
      "a classic F_GETLK failed: {}",
      std::io::Error::last_os_error()
    ));
  }
  if query.l_type == libc::F_UNLCK as libc::c_short {
    return Probe::Broken(
      "a classic F_GETLK of this process does not see an OFD lock it holds (OFD locks \
       behave like the process's own classic locks here)"
        .into(),
    );
  }
  Probe::Works
}

/// Installs the hooks once per process (idempotent). Must run before the first connection
/// of the bundled SQLite is opened — [`crate::store::sqlite::SqliteDb::open`] does it;
/// tests that open a second raw `rusqlite` connection call it first.
pub fn install() -> HookStatus {
  current(STATUS.get_or_init(install_once))
}

/// The installed hooks, or `None` before [`install`].
pub fn installed() -> Option<HookStatus> {
  STATUS.get().map(current)
}

/// The installed status, updated when the hook has refused since.
fn current(status: &HookStatus) -> HookStatus {
  match FCNTL.refusal() {
    Some(why) => HookStatus {
      fcntl: false,
      close: status.close,
      detail: Some(refusal_detail(why)),
    },
    None => status.clone(),
  }
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
    // Before SQLite takes any lock with them: do OFD locks work here at all?
    if let Probe::Broken(why) = probe_ofd(&std::env::temp_dir(), &os::COMMANDS) {
      FCNTL.refuse(why);
    }
    // The fcntl hook goes in either way: it is also what refuses. The close hook goes in
    // either way too: closing a descriptor would drop the host's classic locks whatever
    // kind of locks the engine's copy took.
    let fcntl_rc = set(vfs, c"fcntl".as_ptr(), Some(fcntl_entry()));
    let close_hook: CloseFn = parking_close;
    let close_rc = set(
      vfs,
      c"close".as_ptr(),
      Some(std::mem::transmute::<CloseFn, unsafe extern "C" fn()>(
        close_hook,
      )),
    );
    // Reusing parked descriptors is an economy, not a safeguard: its failure is harmless.
    let open_hook: OpenFn = reusing_open;
    set(
      vfs,
      c"open".as_ptr(),
      Some(std::mem::transmute::<OpenFn, unsafe extern "C" fn()>(
        open_hook,
      )),
    );
    let munmap_hook: MunmapFn = counting_munmap;
    let munmap_rc = set(
      vfs,
      c"munmap".as_ptr(),
      Some(std::mem::transmute::<MunmapFn, unsafe extern "C" fn()>(
        munmap_hook,
      )),
    );
    let fcntl = fcntl_rc == ffi::SQLITE_OK;
    let close = close_rc == ffi::SQLITE_OK;
    // Reading the wal-index from memory relies on the OFD locks too (the engine's SHARED
    // lock keeps the host from rebuilding the wal-index under it): only with every hook in.
    if fcntl && close && munmap_rc == ffi::SQLITE_OK && FCNTL.refusal().is_none() {
      MEMORY_PATH.store(true, Ordering::Release);
    }
    HookStatus {
      fcntl,
      close,
      detail: (!(fcntl && close)).then(|| {
        format!("xSetSystemCall on VFS {name:?}: fcntl rc {fcntl_rc}, close rc {close_rc}")
      }),
    }
  }
}

/// How many lock requests the `fcntl` hook has turned into OFD requests so far (refused
/// requests are not counted).
pub fn lock_calls() -> u64 {
  FCNTL.calls()
}

/// Finds a descriptor of this process on `<db>-shm` (by device and inode: nothing is
/// opened) and asks, with a classic `F_GETLK`, whether a write lock on the DMS byte (128)
/// would conflict. The engine holds a shared lock there while connected: a classic query
/// from the same process sees it only if it is not one of the process's own classic locks.
/// `None` when it cannot be asked.
pub fn probe_shm(db_path: &Path) -> Option<bool> {
  use crate::store::sqlite::{file_id as path_id, shm_path};
  let fd = descriptor_on(path_id(&shm_path(db_path))?)?;
  let mut fl = flock(libc::F_WRLCK as c_int, 128, 1);
  // SAFETY: a classic F_GETLK on our own descriptor; nothing is locked or closed.
  if unsafe { libc::fcntl(fd, os::COMMANDS.getlk, &mut fl) } != 0 {
    return None;
  }
  Some(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// The open-time self-test: the hook ran since `calls_before` and the `-shm` probe sees the
/// engine's lock. When it finds the locks not live, it also turns the memory path off for
/// the process (and, when the hook runs but its locks are not seen, makes it refuse).
/// A "not seen" while the connection's file is no longer at the path (`still_at_path`: a
/// restore replaced it mid-open) is about another `-shm` and leaves the check unprobed.
pub fn self_test(db_path: &Path, calls_before: u64, still_at_path: impl Fn() -> bool) -> LockCheck {
  let status = installed();
  let check = match &status {
    Some(status) if status.fcntl => {
      if lock_calls() == calls_before {
        LockCheck::NotLive(
          "the fcntl hook was not called while the database was opened (this file \
           system's locking does not go through fcntl); the memory path stays off"
            .into(),
        )
      } else {
        match probe_shm(db_path) {
          Some(true) => LockCheck::Live,
          Some(false) if !still_at_path() => LockCheck::LiveUnprobed,
          Some(false) => {
            let why = "a classic F_GETLK from this process does not see the engine's -shm lock";
            FCNTL.refuse_with(format!("open-time self-test: {why}"), true);
            LockCheck::NotLive(format!(
              "{why}; the engine now refuses every further lock, so its calls on this \
               database fail rather than share it unsafely, and the memory path stays off"
            ))
          }
          None => LockCheck::LiveUnprobed,
        }
      }
    }
    Some(status) => LockCheck::NotLive(status.detail.clone().unwrap_or_default()),
    None => LockCheck::NotLive("the hook was never installed".into()),
  };
  if !check.is_live() {
    MEMORY_PATH.store(false, Ordering::Release);
  }
  check
}

/// Descriptors kept open by the close hook.
pub fn parked_count() -> usize {
  lock_parked().len()
}

/// Closes parked descriptors whose file no other descriptor of the process refers to any
/// more; returns how many were closed.
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

#[cfg(test)]
mod tests {
  use super::*;
  use std::os::unix::io::AsRawFd;

  const WRLCK: c_int = libc::F_WRLCK as c_int;
  const UNLCK: c_int = libc::F_UNLCK as c_int;

  /// Two descriptors (two open file descriptions) of one scratch file.
  fn two_descriptors() -> (tempfile::TempDir, std::fs::File, std::fs::File) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let open = |new| {
      let mut options = std::fs::OpenOptions::new();
      options
        .read(true)
        .write(true)
        .create_new(new)
        .open(&path)
        .unwrap()
    };
    (dir, open(true), open(false))
  }

  fn arg(fl: &mut libc::flock) -> *mut c_void {
    (fl as *mut libc::flock).cast()
  }

  /// Whether a classic query through `fd` sees a conflicting write lock on byte 0.
  fn classic_sees_lock(fd: c_int) -> bool {
    let mut fl = flock(WRLCK, 0, 1);
    // SAFETY: F_GETLK reads and fills `fl`, a live `flock`.
    assert_eq!(unsafe { libc::fcntl(fd, libc::F_GETLK, &mut fl) }, 0);
    fl.l_type != libc::F_UNLCK as libc::c_short
  }

  #[test]
  fn the_probe_finds_this_kernels_ofd_locks() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(probe_ofd(dir.path(), &os::COMMANDS), Probe::Works);
    // The scratch file is gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let missing = dir.path().join("missing");
    assert!(matches!(
      probe_ofd(&missing, &os::COMMANDS),
      Probe::Unknown(_)
    ));
  }

  #[cfg(target_os = "linux")]
  #[test]
  fn on_linux_the_probe_rejects_darwins_numbers() {
    // Linux does not know 90: the probe says so before SQLite would find out.
    let dir = tempfile::tempdir().unwrap();
    match probe_ofd(dir.path(), &super::super::commands::DARWIN) {
      Probe::Broken(why) => assert!(why.contains("F_OFD_SETLK (90)"), "{why}"),
      other => panic!("{other:?}"),
    }
  }

  #[test]
  fn a_mapped_lock_is_an_ofd_lock_the_process_can_see() {
    let hook = FcntlHook::new(os::COMMANDS, false);
    let (_dir, a, b) = two_descriptors();
    let mut fl = flock(WRLCK, 0, 1);
    fl.l_pid = 12345; // uninitialised, as SQLite leaves it
    assert_eq!(hook.call(a.as_raw_fd(), libc::F_SETLK, arg(&mut fl)), 0);
    assert_eq!(fl.l_pid, 0);
    assert_eq!(hook.calls(), 1);
    // A classic lock of this process would be invisible to its own classic query.
    assert!(classic_sees_lock(b.as_raw_fd()));
    let mut un = flock(UNLCK, 0, 1);
    assert_eq!(hook.call(a.as_raw_fd(), libc::F_SETLK, arg(&mut un)), 0);
    assert!(!classic_sees_lock(b.as_raw_fd()));
    // Other commands pass through unchanged and are not counted.
    let flags = hook.call(a.as_raw_fd(), libc::F_GETFD, std::ptr::null_mut());
    // SAFETY: F_GETFD takes no argument; `a` is an open file.
    assert_eq!(flags, unsafe { libc::fcntl(a.as_raw_fd(), libc::F_GETFD) });
    assert_eq!(hook.calls(), 2);
  }

  #[test]
  fn both_entry_shapes_reach_the_same_hook() {
    let (_dir, a, b) = two_descriptors();
    let before = lock_calls();
    let mut fl = flock(WRLCK, 0, 1);
    assert_eq!(ofd_fcntl(a.as_raw_fd(), libc::F_SETLK, arg(&mut fl)), 0);
    assert!(classic_sees_lock(b.as_raw_fd()));
    let mut un = flock(UNLCK, 0, 1);
    let rc = ofd_fcntl_stack_arg(a.as_raw_fd(), libc::F_SETLK, 0, 0, 0, 0, 0, 0, arg(&mut un));
    assert_eq!(rc, 0);
    assert!(!classic_sees_lock(b.as_raw_fd()));
    assert!(lock_calls() >= before + 2);
  }

  #[test]
  fn a_kernel_without_the_commands_makes_the_hook_refuse() {
    // This platform's classic numbers, OFD numbers no kernel knows.
    let unknown = LockCommands {
      ofd_getlk: 1_000_036,
      ofd_setlk: 1_000_037,
      ofd_setlkw: 1_000_038,
      ..os::COMMANDS
    };
    let hook = FcntlHook::new(unknown, false);
    let (_dir, a, b) = two_descriptors();
    let mut fl = flock(WRLCK, 0, 1);
    assert_eq!(hook.call(a.as_raw_fd(), libc::F_SETLK, arg(&mut fl)), -1);
    assert_eq!(last_errno(), libc::ENOTSUP);
    let why = hook.refusal().unwrap_or_default();
    assert!(why.contains("EINVAL"), "{why}");
    // No classic lock was taken instead.
    assert!(!classic_sees_lock(b.as_raw_fd()));
    // Queries still answer (classically): SQLite's file-system probe needs them.
    let mut q = flock(WRLCK, 0, 1);
    assert_eq!(hook.call(a.as_raw_fd(), libc::F_GETLK, arg(&mut q)), 0);
    assert_eq!(q.l_type, libc::F_UNLCK as libc::c_short);
    // A release succeeds: no OFD lock can be held where the kernel has none.
    let mut un = flock(UNLCK, 0, 1);
    assert_eq!(hook.call(a.as_raw_fd(), libc::F_SETLK, arg(&mut un)), 0);
  }

  #[test]
  fn a_refusing_hook_takes_no_lock_and_still_releases_its_own() {
    let hook = FcntlHook::new(os::COMMANDS, false);
    let (_dir, a, b) = two_descriptors();
    // An OFD lock taken before the refusal (as by a connection open when a self-test fails).
    let mut held = flock(WRLCK, 0, 1);
    assert_eq!(hook.call(a.as_raw_fd(), libc::F_SETLK, arg(&mut held)), 0);
    hook.refuse_with("test".into(), true);
    assert_eq!(hook.refusal(), Some("test"));
    assert!(refusal_detail("test").contains("QUOTA_STORE_DRIVER=redis"));
    // Releasing it goes through (only this descriptor's OFD lock; never a classic one).
    let mut un = flock(UNLCK, 0, 1);
    assert_eq!(hook.call(a.as_raw_fd(), libc::F_SETLK, arg(&mut un)), 0);
    assert!(!classic_sees_lock(b.as_raw_fd()));
    // Taking one fails, and nothing is taken.
    let mut fl = flock(WRLCK, 0, 1);
    assert_eq!(hook.call(a.as_raw_fd(), libc::F_SETLKW, arg(&mut fl)), -1);
    assert_eq!(last_errno(), libc::ENOTSUP);
    assert_eq!(hook.calls(), 1);
    assert!(!classic_sees_lock(b.as_raw_fd()));
  }
}
