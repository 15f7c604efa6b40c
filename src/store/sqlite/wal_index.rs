//! "Has anyone committed since?", answered from memory, without a system call.
//!
//! In WAL mode every commit — by the engine, the host's connection, or another process —
//! rewrites the header of the wal-index (the `-shm` file, which every SQLite connection
//! maps into memory): the frame count grows, the change counter and checksum move, and a
//! WAL restart draws new salts. So two equal copies of that 48-byte header, read at two
//! moments, mean nothing was committed in between, and values read from the database
//! after the first copy was taken are still current at the second. The hot path uses
//! that to skip its read transaction (two lock system calls and a `fcntl`-based snapshot)
//! when nothing changed since the last one.
//!
//! Reading the header follows SQLite's own reader (`walIndexTryHdr`): the first copy,
//! a barrier, the second copy; a writer updates them in the opposite order, so two equal
//! copies are a complete header, and a difference is a commit in progress (then: no
//! token, read the database).
//!
//! The pointer comes from the VFS's public `xShmMap` on the connection's own file, inside
//! a read transaction of a WAL-mode connection (region 0 is mapped then). SQLite unmaps
//! that region only through `munmap` — counted by the hook in `locks.rs` — so the pointer
//! is used only while that count has not moved since it was taken. Where the hook is not
//! installed, no pointer is kept and every call reads the database.

use super::locks;
use rusqlite::{ffi, Connection};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{fence, AtomicU32, Ordering};

/// One copy of the wal-index header: 48 bytes, as 12 native-endian words.
pub(crate) type WalToken = [u32; 12];

const HEADER_WORDS: usize = 12;
/// `WALINDEX_PGSZ` in SQLite's `wal.c`: the size of each wal-index region.
const WALINDEX_PGSZ: c_int = 32768;

/// Region 0 of the connection's wal-index, and the unmap count when it was taken.
#[derive(Debug, Default)]
pub(crate) struct WalIndexView {
  mapped: Option<(*const AtomicU32, u64)>,
  /// The connection is not in WAL mode: not asked again (its mode does not change while
  /// it is open; the engine sets WAL at open and warns when it did not take).
  not_wal: bool,
}

impl WalIndexView {
  /// The header as it is now: `None` when no live mapping is known or a commit is in
  /// progress.
  pub(crate) fn token(&self) -> Option<WalToken> {
    let (words, unmaps) = self.mapped?;
    if locks::unmaps() != Some(unmaps) {
      return None;
    }
    let mut first = [0u32; HEADER_WORDS];
    let mut second = [0u32; HEADER_WORDS];
    // SAFETY: `words` points at region 0 of the wal-index (at least 32 KiB, page-aligned),
    // still mapped: SQLite has not unmapped anything since it was taken. Other processes
    // write it concurrently, hence atomic loads.
    unsafe {
      for (i, word) in first.iter_mut().enumerate() {
        *word = (*words.add(i)).load(Ordering::Relaxed);
      }
      fence(Ordering::SeqCst);
      for (i, word) in second.iter_mut().enumerate() {
        *word = (*words.add(HEADER_WORDS + i)).load(Ordering::Relaxed);
      }
    }
    // `isInit` is the byte at offset 12: the first byte of word 3 in memory order.
    let initialised = first[3].to_ne_bytes()[0] != 0;
    (first == second && initialised).then_some(first)
  }

  /// Takes the pointer, when there is none that is still live. Call inside a read
  /// transaction; does nothing unless the connection is in WAL mode.
  pub(crate) fn refresh(&mut self, conn: &Connection) {
    if self.token().is_some() {
      return;
    }
    self.mapped = None;
    if self.not_wal {
      return;
    }
    let Some(unmaps) = locks::unmaps() else {
      return;
    };
    let mode = conn
      .prepare_cached("PRAGMA main.journal_mode")
      .and_then(|mut stmt| stmt.query_row([], |row| row.get::<_, String>(0)));
    match mode {
      Ok(mode) if mode.eq_ignore_ascii_case("wal") => {}
      Ok(_) => {
        self.not_wal = true;
        return;
      }
      Err(_) => return,
    }
    if conn.is_autocommit() {
      return;
    }
    let Some(file) = super::main_db_file(conn) else {
      return;
    };
    // SAFETY: a live `sqlite3_file` with methods; `xShmMap` (io methods version 2+) with
    // `bExtend = 0` returns region 0, mapped since this WAL-mode read transaction began,
    // or null.
    unsafe {
      let file = file.as_ptr();
      let methods = (*file).pMethods;
      if (*methods).iVersion < 2 {
        return;
      }
      let Some(shm_map) = (*methods).xShmMap else {
        return;
      };
      let mut region: *mut c_void = std::ptr::null_mut();
      let rc = shm_map(file, 0, WALINDEX_PGSZ, 0, &mut region);
      if rc == ffi::SQLITE_OK && !region.is_null() {
        self.mapped = Some((region.cast_const().cast(), unmaps));
      }
    }
  }

  /// Forgets the pointer (before the connection closes).
  pub(crate) fn forget(&mut self) {
    self.mapped = None;
  }
}

// SAFETY: the pointer is into memory shared by every thread of the process (and other
// processes); it is read with atomic loads only, by whoever holds the connection.
unsafe impl Send for WalIndexView {}
