// Shared helpers for the SQLite store tests: a per-file temp DATA_DIR and a host connection
// opened exactly like OmniRoute opens its own (WAL, busy_timeout 2000, synchronous NORMAL).
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
export const Database = require('better-sqlite3')

const dataDirs = []

/**
 * A temp `DATA_DIR` for this test file, removed when its process exits: after the
 * engine's buffered records are committed and its connection closed, so the engine's own
 * exit commit does not look for a file that is gone.
 */
export function makeDataDir(tag) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `qe-${tag}-`))
  if (dataDirs.length === 0) process.on('exit', removeDataDirs)
  dataDirs.push(dir)
  process.env.DATA_DIR = dir
  return dir
}

function removeDataDirs() {
  try {
    loadEngine().closeQuotaDb()
  } catch {
    // Leaving anyway: the folders go all the same.
  }
  for (const dir of dataDirs) fs.rmSync(dir, { recursive: true, force: true })
}

export function openHost(dbFile) {
  const db = new Database(dbFile)
  db.pragma('journal_mode = WAL')
  db.pragma('busy_timeout = 2000')
  db.pragma('synchronous = NORMAL')
  return db
}

/** The main entry through `require` (the CJS entry, same exports as the ESM one). */
export function loadEngine() {
  return require('@omniroute/quota-engine')
}
