// Shared helpers for the SQLite store tests: a per-file temp DATA_DIR and a host connection
// opened exactly like OmniRoute opens its own (WAL, busy_timeout 2000, synchronous NORMAL).
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
export const Database = require('better-sqlite3')

export function makeDataDir(tag) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `qe-${tag}-`))
  process.env.DATA_DIR = dir
  return dir
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
