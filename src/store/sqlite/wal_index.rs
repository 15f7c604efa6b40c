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

/// `WALINDEX_HDR_SIZE / 4`: the words before region 0's page-number array (two header
/// copies and the checkpoint information).
const HDR_WORDS: usize = 34;
/// `HASHTABLE_NPAGE`: frames per region's page-number array (region 0 has
/// `HASHTABLE_NPAGE - HDR_WORDS`).
const NPAGE: u32 = 4096;
const NPAGE_ONE: u32 = NPAGE - HDR_WORDS as u32;
/// At most this many new frames are looked through; more, and the caller reads the
/// database (a full read costs about as much as scanning some thousands of words).
const MAX_SCAN: u32 = 8192;

/// Word indices in a header copy (`WalIndexHdr` in SQLite's `wal.c`).
const W_CHANGE: usize = 2; // iChange: +1 at every commit
const W_PAGE_SIZE: usize = 3; // isInit, bigEndCksum, szPage
const W_MX_FRAME: usize = 4;
const W_SALT: [usize; 2] = [8, 9];

/// Whether `after` differs from `before` by exactly one commit: `iChange` + 1 and either
/// more frames appended to the same WAL (the same salts), or the WAL restarted by that
/// commit — its first frame write moves to the start of the file, the first salt + 1
/// (`walRestartHdr` in SQLite's `wal.c`: stored big-endian, the second salt drawn at
/// random, the header written without an `iChange` step) — and at least one frame. Taken
/// with `before` read while this connection held the write lock and `after` right after
/// its commit, that one commit is this connection's own: a restart is only ever done by
/// the writer holding that lock.
pub(crate) fn one_commit_after(before: &WalToken, after: &WalToken) -> bool {
  let salt = W_SALT[0];
  let appended =
    W_SALT.iter().all(|&w| after[w] == before[w]) && after[W_MX_FRAME] > before[W_MX_FRAME];
  let restarted = u32::from_be(after[salt]) == u32::from_be(before[salt]).wrapping_add(1)
    && after[W_MX_FRAME] > 0;
  after[W_CHANGE] == before[W_CHANGE].wrapping_add(1) && (appended || restarted)
}

/// The region of the wal-index holding frame `frame`'s page number, and the word within
/// it (`walFramePage` and `walFramePgno` in SQLite's `wal.c`); frames count from 1.
fn frame_slot(frame: u32) -> (usize, usize) {
  debug_assert!(frame >= 1);
  if frame <= NPAGE_ONE {
    (0, HDR_WORDS + frame as usize - 1)
  } else {
    let past = frame - 1 - NPAGE_ONE;
    (1 + (past / NPAGE) as usize, (past % NPAGE) as usize)
  }
}

/// What the frames committed between two headers wrote, as far as a list of pages goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Since {
  /// None of the pages is in any frame committed in between.
  Untouched,
  /// One of them is, or it cannot be told (the WAL restarted, too many frames, a region
  /// not mapped, a commit in progress): read the database.
  Unknown,
}

/// The wal-index regions of the connection, and the unmap count when region 0 was taken.
#[derive(Debug, Default)]
pub(crate) struct WalIndexView {
  mapped: Option<(*const AtomicU32, u64)>,
  /// Regions 1, 2, …: mapped (inside read transactions) as the WAL grows, valid while
  /// region 0 is.
  more: Vec<*const AtomicU32>,
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
    if let Some(token) = self.token() {
      self.map_ahead(conn, token[W_MX_FRAME]);
      return;
    }
    self.mapped = None;
    self.more.clear();
    if self.not_wal {
      return;
    }
    let Some(unmaps) = locks::unmaps() else {
      return;
    };
    match super::values::one::<String>(conn, "PRAGMA main.journal_mode", []) {
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
    if let Some(token) = self.token() {
      self.map_ahead(conn, token[W_MX_FRAME]);
    }
  }

  /// Maps the regions up to the one after `mx_frame`'s (so the WAL can grow by a region
  /// before a frame's page number is out of reach). Call inside a read transaction, with
  /// region 0 live; a region SQLite has not created yet is left for a later call.
  fn map_ahead(&mut self, conn: &Connection, mx_frame: u32) {
    let wanted = frame_slot(mx_frame.max(1)).0 + 1;
    if self.more.len() >= wanted {
      return;
    }
    let Some(file) = super::main_db_file(conn) else {
      return;
    };
    // SAFETY: as in `refresh`: a live `sqlite3_file` whose io methods have `xShmMap` (region
    // 0 was mapped through it), inside a read transaction; `bExtend = 0` maps an existing
    // region or returns null, and SQLite keeps every mapped region until it unmaps them
    // all (counted by the hook in `locks.rs`).
    unsafe {
      let file = file.as_ptr();
      let Some(shm_map) = (*(*file).pMethods).xShmMap else {
        return;
      };
      while self.more.len() < wanted {
        let mut region: *mut c_void = std::ptr::null_mut();
        let index = c_int::try_from(self.more.len() + 1).unwrap_or(c_int::MAX);
        let rc = shm_map(file, index, WALINDEX_PGSZ, 0, &mut region);
        if rc != ffi::SQLITE_OK || region.is_null() {
          return;
        }
        self.more.push(region.cast_const().cast());
      }
    }
  }

  /// Whether any frame committed after header `then` up to header `now` (both from
  /// [`Self::token`], `now` the later) wrote one of `pages`.
  ///
  /// Frames are only ever appended after the last committed one, each with its page
  /// number in the wal-index's page-number arrays, written before the header that commits
  /// it (the reader's barrier in `token` orders them); a WAL restart draws new salts before
  /// any frame is overwritten. So with equal salts, frames `then.mxFrame + 1 ..=
  /// now.mxFrame` are exactly what was committed in between, and the header read again
  /// after the scan, salts unchanged, shows none of them was overwritten meanwhile.
  ///
  /// With `schema_cookie`, a frame of page 1 does not count by itself: the latest one's
  /// schema cookie is read from the WAL (one `pread`), and only a cookie other than
  /// `schema_cookie` — a schema change — counts. Page 1 is also rewritten whenever the
  /// file grows or its freelist changes, which the host's own inserts do now and then.
  pub(crate) fn wrote_since(
    &self,
    conn: &Connection,
    then: &WalToken,
    now: &WalToken,
    pages: &[u32],
    schema_cookie: Option<u32>,
  ) -> Since {
    let Some((region0, unmaps)) = self.mapped else {
      return Since::Unknown;
    };
    if locks::unmaps() != Some(unmaps) {
      return Since::Unknown;
    }
    let (from, to) = (then[W_MX_FRAME], now[W_MX_FRAME]);
    if then[W_SALT[0]] != now[W_SALT[0]]
      || then[W_SALT[1]] != now[W_SALT[1]]
      || then[W_PAGE_SIZE] != now[W_PAGE_SIZE]
      || to < from
      || to - from > MAX_SCAN
    {
      return Since::Unknown;
    }
    fence(Ordering::SeqCst);
    let mut page_one = None;
    for frame in from + 1..=to {
      let (region, word) = frame_slot(frame);
      let base = if region == 0 {
        region0
      } else {
        match self.more.get(region - 1) {
          Some(&base) => base,
          None => return Since::Unknown,
        }
      };
      // SAFETY: a region of 32 KiB (8192 words; `word` < 4096) that SQLite mapped and has
      // not unmapped (the count is unchanged, and only this connection, held by the caller,
      // can make it unmap this file's regions). Other processes write it: atomic loads.
      let pgno = unsafe { (*base.add(word)).load(Ordering::Relaxed) };
      if pgno == 1 && schema_cookie.is_some() {
        page_one = Some(frame);
      } else if pages.contains(&pgno) {
        return Since::Unknown;
      }
    }
    if let (Some(frame), Some(cookie)) = (page_one, schema_cookie) {
      if schema_cookie_in_frame(conn, now, frame) != Some(cookie) {
        return Since::Unknown;
      }
    }
    fence(Ordering::SeqCst);
    match self.token() {
      Some(after) if after[W_SALT[0]] == now[W_SALT[0]] && after[W_SALT[1]] == now[W_SALT[1]] => {
        Since::Untouched
      }
      _ => Since::Unknown,
    }
  }

  /// Forgets the pointers (before the connection closes).
  pub(crate) fn forget(&mut self) {
    self.mapped = None;
    self.more.clear();
  }
}

/// The schema cookie (database header offset 40, big-endian) in page 1 as frame `frame`
/// holds it, read from the WAL through the connection's own WAL file
/// (`SQLITE_FCNTL_JOURNAL_POINTER`: SQLite's `sqlite3_file` of the WAL while it has one),
/// `None` when it cannot be read or the frame's salts are not `now`'s (it belongs to an
/// older generation of the WAL). The caller checks afterwards that the WAL did not restart
/// meanwhile.
fn schema_cookie_in_frame(conn: &Connection, now: &WalToken, frame: u32) -> Option<u32> {
  let size_bytes = now[W_PAGE_SIZE].to_ne_bytes();
  let page_size = match u16::from_ne_bytes([size_bytes[2], size_bytes[3]]) {
    1 => 65536,
    n => i64::from(n),
  };
  // The WAL header is 32 bytes; each frame a 24-byte header (salts at 8..16), then the page.
  let at = 32 + i64::from(frame - 1) * (page_size + 24) + 8;
  // The WAL's (or, without one, the rollback journal's) file; an unopened journal has no
  // methods and is refused.
  let file = super::journal_file(conn)?;
  let mut buf = [0u8; 60];
  // SAFETY: a `sqlite3_file` with methods that SQLite keeps open while the connection is;
  // `xRead` of 60 bytes into `buf`. A short read (the frame not in the file) returns
  // SQLITE_IOERR_SHORT_READ.
  let rc = unsafe {
    let read = (*file.as_ref().pMethods).xRead?;
    read(
      file.as_ptr(),
      buf.as_mut_ptr().cast(),
      buf.len() as c_int,
      at,
    )
  };
  if rc != ffi::SQLITE_OK {
    return None;
  }
  let mut salts = [0u8; 8];
  salts[..4].copy_from_slice(&now[W_SALT[0]].to_ne_bytes());
  salts[4..].copy_from_slice(&now[W_SALT[1]].to_ne_bytes());
  if buf[..8] != salts {
    return None;
  }
  // The page starts 16 bytes after the salts; the cookie is at its offset 40.
  Some(u32::from_be_bytes([buf[56], buf[57], buf[58], buf[59]]))
}

// SAFETY: the pointer is into memory shared by every thread of the process (and other
// processes); it is read with atomic loads only, by whoever holds the connection.
unsafe impl Send for WalIndexView {}

#[cfg(test)]
mod tests {

  #[test]
  fn one_commit_after_is_one_header_write_on_the_same_wal() {
    let mut before = [0u32; HEADER_WORDS];
    before[W_CHANGE] = u32::MAX; // wraps
    before[W_MX_FRAME] = 10;
    before[W_SALT[0]] = 7;
    let mut after = before;
    after[W_CHANGE] = 0;
    after[W_MX_FRAME] = 12;
    assert!(one_commit_after(&before, &after));
    let mut two = after;
    two[W_CHANGE] = 1;
    assert!(
      !one_commit_after(&before, &two),
      "another writer's commit too"
    );
    let mut other_salts = after;
    other_salts[W_SALT[0]] = 9; // + 2 read either way round: no restart on any machine
    assert!(
      !one_commit_after(&before, &other_salts),
      "new salts, but not a restart's"
    );
    // A restart by this commit: the first salt + 1 as a big-endian number, the second one
    // drawn anew, the frames counted from the start of the file.
    let mut restarted = after;
    restarted[W_SALT[0]] = 8u32.to_be();
    restarted[W_SALT[1]] = 0xdead_beef;
    restarted[W_MX_FRAME] = 3;
    let mut before_restart = before;
    before_restart[W_SALT[0]] = 7u32.to_be();
    assert!(one_commit_after(&before_restart, &restarted));
    let mut restarted_twice = restarted;
    restarted_twice[W_SALT[0]] = 9u32.to_be();
    assert!(!one_commit_after(&before_restart, &restarted_twice));
    let mut restart_then_another = restarted;
    restart_then_another[W_CHANGE] = 1;
    assert!(
      !one_commit_after(&before_restart, &restart_then_another),
      "another writer's commit after the restart"
    );
    let mut restart_alone = restarted;
    restart_alone[W_MX_FRAME] = 0;
    assert!(
      !one_commit_after(&before_restart, &restart_alone),
      "a restart without a frame is no commit"
    );
    let mut none = after;
    none[W_MX_FRAME] = 10;
    assert!(!one_commit_after(&before, &none), "no frame appended");
  }

  use super::*;

  /// `walFramePage` / `walFramePgno` in SQLite's `wal.c`, written out as there.
  fn sqlite_slot(frame: u32) -> (usize, usize) {
    let hdr = 136 / 4;
    let npage_one = 4096 - hdr;
    let hash = ((frame + 4096 - npage_one - 1) / 4096) as usize;
    if hash == 0 {
      (0, (hdr + frame - 1) as usize)
    } else {
      (hash, ((frame - 1 - npage_one) % 4096) as usize)
    }
  }

  #[test]
  fn frame_slots_are_sqlites() {
    for frame in (1..20_000).chain([4061, 4062, 4063, 8157, 8158, 8159, 1 << 20]) {
      assert_eq!(frame_slot(frame), sqlite_slot(frame), "frame {frame}");
    }
    assert_eq!(frame_slot(4062), (0, 4095));
    assert_eq!(frame_slot(4063), (1, 0));
  }
}
