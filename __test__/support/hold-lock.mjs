// Holds a lock on a SQLite file from another process, so the test process's event loop
// stays free: `node hold-lock.mjs <db> <mode> <holdMs>`. Prints `locked` once the lock is
// held and `released` after it is let go, then exits. Mode `transaction`: BEGIN EXCLUSIVE
// (in WAL mode that is the write lock: writers wait, readers still read).
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const Database = require('better-sqlite3')
const [dbPath, mode, holdMs] = process.argv.slice(2)

const db = new Database(dbPath)
db.pragma('busy_timeout = 2000')
if (mode !== 'transaction') throw new Error(`unknown mode ${mode}`)
db.exec('BEGIN EXCLUSIVE')
process.stdout.write('locked\n')
setTimeout(() => {
  db.exec('COMMIT')
  db.close()
  process.stdout.write('released\n')
}, Number(holdMs))
