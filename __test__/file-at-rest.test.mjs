// The host's file at rest and under replacement (docs/sqlite.md#the-file-at-rest): after the
// last use of the file it is self-contained, as better-sqlite3 alone leaves it; a file put
// at the path (the host's restore, a rename over it) is followed at once, and no frame of
// the old WAL reaches it; a file renamed over one the host still has open is followed once
// the host lets go of the old one; closing and reopening beside the host's connection keeps one
// descriptor per file (docs/two-sqlites.md#parked-descriptors).
import { test, after, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawnSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { startHost } from '../bench/host.mjs'

const require = createRequire(import.meta.url)
const Database = require('better-sqlite3')
const exitChild = fileURLToPath(new URL('./support/host-exit.mjs', import.meta.url))
const linkedChild = fileURLToPath(new URL('./support/linked-file.mjs', import.meta.url))
const dirs = []
const tempDir = (tag) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `qe-rest-${tag}-`))
  dirs.push(dir)
  return dir
}
const host = startHost({ dir: tempDir('main'), checkpointMs: 0 })
const engine = require('@omniroute/quota-engine')
const { enforceQuotaShare, recordConsumption } = require('@omniroute/quota-engine/compat/enforce')

// A test that fails with the host's connection closed leaves it open for the next one.
afterEach(() => host.db || host.open())
after(() => {
  host.stop()
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true })
})

/** Opens a copy of `file` alone (no -wal, no -shm) in a folder of its own. */
function copyAlone(file) {
  const copy = path.join(tempDir('copy'), 'storage.sqlite')
  fs.copyFileSync(file, copy)
  return new Database(copy, { readonly: true })
}

let seq = 0
function pool(limit) {
  const tag = `rest-${++seq}`
  const request = { apiKeyId: `${tag}-key`, connectionId: `${tag}-conn`, provider: tag }
  engine.upsertProviderPlan({ connectionId: request.connectionId, provider: tag, dimensions: [{ unit: 'requests', window: 'daily', limit }], source: 'manual' })
  const created = engine.createPool({ connectionId: request.connectionId, name: tag, allocations: [{ apiKeyId: request.apiKeyId, weight: 100, policy: 'hard' }] })
  return { request, dimensionKey: `${created.id}:requests:daily` }
}
const record = (request, n = 1) => recordConsumption({ ...request, cost: { requests: n } })
const consumedIn = (db, { request, dimensionKey }) =>
  db.prepare('SELECT coalesce(sum(consumed), 0) AS n FROM quota_consumption WHERE api_key_id = ? AND dimension_key = ?').get(request.apiKeyId, dimensionKey).n

test('a clean exit with host and engine writing leaves storage.sqlite self-contained, as better-sqlite3 alone does', () => {
  for (const mode of ['alone', 'engine']) {
    const dir = tempDir(mode)
    const run = spawnSync(process.execPath, [exitChild, dir, mode], { encoding: 'utf8', env: process.env })
    assert.equal(run.status, 0, run.stderr)
    assert.match(run.stdout, /DONE/)
    const file = path.join(dir, 'storage.sqlite')
    assert.equal(fs.existsSync(`${file}-wal`), false, `${mode}: a -wal is left at rest`)
    assert.equal(fs.existsSync(`${file}-shm`), false, `${mode}: a -shm is left at rest`)
    if (mode === 'engine') {
      // An operator restores a backup from the stopped server by copying it over the file:
      // it opens as the backup, with nothing of a WAL left behind.
      const backup = path.join(tempDir('stopped'), 'backup.sqlite')
      const b = new Database(backup)
      b.exec("CREATE TABLE host_settings (k TEXT PRIMARY KEY, v TEXT); INSERT INTO host_settings VALUES ('a', 'b')")
      b.close()
      const keep = path.join(tempDir('kept'), 'storage.sqlite')
      fs.copyFileSync(file, keep)
      fs.copyFileSync(backup, file)
      const restored = new Database(file)
      assert.equal(restored.prepare('SELECT v FROM host_settings').pluck().get(), 'b')
      assert.equal(restored.pragma('integrity_check', { simple: true }), 'ok')
      restored.close()
      fs.copyFileSync(keep, file)
    }
    const copy = copyAlone(file)
    try {
      if (mode === 'alone') {
        assert.equal(copy.prepare('SELECT count(*) AS n FROM host_table_0').get().n, 50)
      } else {
        assert.equal(copy.prepare('SELECT count(*) AS n FROM call_logs').get().n, 50, "the host's rows")
        assert.equal(copy.prepare('SELECT sum(consumed) AS n FROM quota_consumption').get().n, 50, "the engine's records")
      }
    } finally {
      copy.close()
    }
  }
})

test('records made after the exit\'s close (a later exit listener, a worker still running) land in storage.sqlite itself, no WAL left', () => {
  for (const mode of ['late', 'worker']) {
    const dir = tempDir(mode)
    const run = spawnSync(process.execPath, [exitChild, dir, mode], { encoding: 'utf8', env: process.env })
    assert.equal(run.status, 0, run.stderr)
    const made = Number(/DONE(?: worker made at least (\d+))?/.exec(run.stdout)?.[1] ?? 1)
    const file = path.join(dir, 'storage.sqlite')
    const wal = fs.existsSync(`${file}-wal`) ? fs.statSync(`${file}-wal`).size : 0
    const copy = copyAlone(file)
    const alone = copy.prepare('SELECT sum(consumed) AS n FROM quota_consumption').get().n
    copy.close()
    const withWal = new Database(file, { readonly: true })
    const all = withWal.prepare('SELECT sum(consumed) AS n FROM quota_consumption').get().n
    withWal.close()
    assert.equal(wal, 0, `${mode}: ${wal} bytes of WAL left at rest`)
    assert.equal(alone, all, `${mode}: the file alone holds every record`)
    assert.ok(mode === 'late' ? alone === 51 : alone >= 50 + made, `${mode}: ${alone} records`)
  }
})

test('closeQuotaDb() as the last user leaves no WAL: another file renamed to the path reads as itself', async () => {
  const p = pool(100)
  await record(p.request, 4)
  host.close() // the host's closeDbInstance(): checkpoint, close, resetters (closeQuotaDb)
  const keep = path.join(tempDir('keep'), 'storage.sqlite')
  try {
    await record(p.request, 1) // the engine alone reopens, records, ...
    engine.closeQuotaDb() // ... and closes last
    assert.equal(fs.existsSync(`${host.file}-wal`), false, 'the -wal is left')
    fs.copyFileSync(host.file, keep)
    const copy = copyAlone(host.file)
    assert.equal(consumedIn(copy, p), 5)
    copy.close()
    // Another database put at the path reads as that database, with nothing of the engine's.
    const other = path.join(tempDir('other'), 'other.sqlite')
    const db = new Database(other)
    db.exec('CREATE TABLE host_logs (id INTEGER PRIMARY KEY)')
    db.close()
    fs.renameSync(other, host.file)
    const reader = new Database(host.file, { readonly: true })
    assert.deepEqual(reader.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").pluck().all(), ['host_logs'])
    reader.close()
  } finally {
    engine.closeQuotaDb()
    if (fs.existsSync(keep)) {
      for (const suffix of ['-wal', '-shm']) fs.rmSync(host.file + suffix, { force: true })
      fs.copyFileSync(keep, host.file)
    }
    host.open()
  }
})

test('a backup renamed over the file while the host keeps the old one open is followed once the host lets go of it', async () => {
  const p = pool(8)
  await record(p.request, 3)
  assert.equal(engine.flushQuotaWrites(), null)
  // The backup: the same database with the counter at 10.
  const backup = path.join(tempDir('backup'), 'backup.sqlite')
  await host.backup(backup)
  const b = new Database(backup)
  b.prepare('UPDATE quota_consumption SET consumed = 10 WHERE api_key_id = ?').run(p.request.apiKeyId)
  b.close()
  await record(p.request, 1) // buffered when the backup is renamed over the file
  fs.renameSync(backup, host.file)
  // The host's connection is still on the old file, whose -wal and -shm are at the path:
  // the engine fails open rather than attach the new file to them.
  host.logCall(p.request.apiKeyId)
  assert.equal((await enforceQuotaShare(p.request)).kind, 'allow')
  assert.ok(host.logs.some((l) => /whose -wal and -shm a connection/.test(JSON.stringify(l))), JSON.stringify(host.logs))
  // The host closes and reopens (its restore, a restart): the engine follows the new file.
  host.close()
  host.open()
  const decision = await enforceQuotaShare(p.request)
  assert.equal(decision.kind, 'block', `10 restored + 1 carried: ${JSON.stringify(decision)}`)
  await record(p.request, 2)
  engine.closeQuotaDb()
  const reader = new Database(host.file, { readonly: true })
  // 10 restored + the buffered one carried over + 2.
  assert.equal(consumedIn(reader, p), 13)
  assert.equal(reader.pragma('integrity_check', { simple: true }), 'ok')
  reader.close()
  assert.ok(host.logs.some((l) => /carried|moved|replaced/i.test(`${l.msg} ${JSON.stringify(l.fields)}`)), JSON.stringify(host.logs))
  host.close()
  host.open()
  assert.equal(consumedIn(host.db, p), 13)
})

// The same with the host committing to the old file after the rename, a backup laid out
// differently (vacuumed) and a reader of the path meanwhile: the renamed-in file is whole at
// rest, holding the backup's counter (what was recorded while the engine refused is not
// counted, and it says so), whoever closes first. Before the engine refused, it attached
// the new file to the old WAL: malformed at rest, or its records silently lost.
const renameChild = fileURLToPath(new URL('./support/rename-over-live.mjs', import.meta.url))
for (const [order, variant] of [['engine-first'], ['host-first'], ['host-first', 'rm-shm']]) {
  test(`a backup renamed over the file while the host keeps committing to the old one stays whole at rest, ${order}${variant ? `, ${variant}` : ''}`, () => {
    const run = spawnSync(process.execPath, [renameChild, tempDir('rename'), order, variant ?? ''], { encoding: 'utf8', env: process.env })
    assert.equal(run.status, 0, run.stderr)
    const { during, ...atRest } = JSON.parse(run.stdout.trim().split('\n').pop())
    assert.deepEqual(atRest, { integrity: 'ok', consumed: 3, said: true }, `a reader meanwhile: ${during}`)
  })
}

/** A pool of `limit` with 3 recorded and a host row in a backup, then 4 more in the live file only. */
async function backedUp(limit) {
  const p = pool(limit)
  await record(p.request, 3)
  host.logCall(p.request.apiKeyId)
  assert.equal(engine.flushQuotaWrites(), null)
  const backup = path.join(tempDir('restore'), 'db_backup.sqlite')
  await host.backup(backup)
  await record(p.request, 4) // 7 in the live file, 3 in the backup
  assert.equal(engine.flushQuotaWrites(), null)
  return { p, backup }
}

test("the host's restore flow while the engine's connection stays open: the restored counters count at once", async () => {
  const { p, backup } = await backedUp(8)
  // restoreDbBackup(): close (resetters run), a request in the pause reopens the engine's
  // connection, then unlink the four files, copy the backup in, reopen.
  host.close()
  assert.equal((await enforceQuotaShare(p.request)).kind, 'allow')
  for (const suffix of ['', '-wal', '-shm', '-journal']) fs.rmSync(host.file + suffix, { force: true })
  fs.copyFileSync(backup, host.file)
  host.open()
  await record(p.request, 4) // 3 + 4 = 7 < 8: allowed next, then blocked
  assert.equal((await enforceQuotaShare(p.request)).kind, 'allow')
  await record(p.request, 1)
  assert.equal((await enforceQuotaShare(p.request)).kind, 'block')
  assert.equal(engine.flushQuotaWrites(), null)
  assert.equal(consumedIn(host.db, p), 8)
  assert.equal(host.db.pragma('integrity_check', { simple: true }), 'ok')
})

// The host's restore awaits between its unlinks, and its copy of the backup starts from an
// empty file: a request (from another thread or process, for the copy) may come in each gap.
const restoreGaps = {
  'the file unlinked': { sidecars: false, copied: null },
  'the file and its sidecars unlinked': { sidecars: true, copied: null },
  'the copy begun (the file empty)': { sidecars: true, copied: () => 0 },
  'the copy half done': { sidecars: true, copied: (size) => size / 2 },
}
for (const [gap, { sidecars, copied }] of Object.entries(restoreGaps)) {
  test(`a request in the restore's gaps (${gap}): no database is made there, the backup is restored whole and counts`, async () => {
    const { p, backup } = await backedUp(100)
    const hostRows = host.db.prepare('SELECT count(*) AS n FROM call_logs').get().n
    host.close()
    for (const suffix of ['', ...(sidecars ? ['-wal', '-shm', '-journal'] : [])]) fs.rmSync(host.file + suffix, { force: true })
    const partial = copied && fs.readFileSync(backup).subarray(0, copied(fs.statSync(backup).size))
    if (partial) fs.writeFileSync(host.file, partial)
    const logged = host.logs.length
    assert.equal((await enforceQuotaShare(p.request)).kind, 'allow', 'fails open while the file is not back')
    await record(p.request, 2) // no file to resolve it against: not counted, as the restore drops what came after the backup
    engine.flushQuotaWrites()
    if (partial) assert.deepEqual(fs.readFileSync(host.file), partial, 'the engine wrote nothing into the copy')
    else assert.equal(fs.existsSync(host.file), false, 'the engine made no file at the path')
    if (sidecars) assert.equal(fs.existsSync(`${host.file}-wal`), false, 'the engine made no WAL')
    assert.ok(
      host.logs.slice(logged).some((l) => /missing or empty where the engine had it open|is not whole yet/.test(JSON.stringify(l))),
      JSON.stringify(host.logs.slice(logged)),
    )
    for (const suffix of ['-wal', '-shm', '-journal']) fs.rmSync(host.file + suffix, { force: true })
    fs.copyFileSync(backup, host.file)
    host.open()
    assert.equal(host.db.prepare('SELECT count(*) AS n FROM call_logs').get().n, hostRows, "the host's rows restored")
    assert.equal((await enforceQuotaShare(p.request)).kind, 'allow')
    assert.equal(engine.flushQuotaWrites(), null)
    assert.equal(consumedIn(host.db, p), 3, "the backup's 3")
    // Stopped (the engine's close, then the host's): the file alone is whole.
    engine.closeQuotaDb()
    host.close()
    const alone = copyAlone(host.file)
    host.open()
    try {
      assert.equal(alone.pragma('integrity_check', { simple: true }), 'ok')
      assert.equal(alone.prepare('SELECT count(*) AS n FROM call_logs').get().n, hostRows)
      assert.equal(consumedIn(alone, p), 3)
    } finally {
      alone.close()
    }
    await record(p.request, 2)
    assert.equal(engine.flushQuotaWrites(), null)
    assert.equal(consumedIn(host.db, p), 5, 'records after the restore count')
  })
}

/** This process's descriptors on the host file and its -wal/-shm. */
function descriptorsOn(file) {
  const names = new Set([file, `${file}-wal`, `${file}-shm`].map((f) => fs.realpathSync(path.dirname(f)) + path.sep + path.basename(f)))
  let n = 0
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    try {
      if (names.has(fs.readlinkSync(`/proc/self/fd/${fd}`))) n++
    } catch {}
  }
  return n
}

/** The host's (classic, this process's) POSIX locks on the file and its -shm, from /proc/locks. */
function hostLocks(file) {
  const inodes = [file, `${file}-shm`].map((f) => fs.statSync(f).ino)
  return fs
    .readFileSync('/proc/locks', 'utf8')
    .split('\n')
    .filter((line) => / POSIX /.test(line) && line.includes(` ${process.pid} `) && inodes.some((ino) => line.includes(`:${ino} `)))
    .map((line) => line.replace(/^\d+:\s*/, ''))
    .sort()
}

test("the host's backup API, given the copy in one step, completes while the engine records; the copy holds what was committed before it", async () => {
  const { request, dimensionKey } = pool(1e9)
  // A file of a few hundred pages: 100 pages a step (the default) would take many steps.
  host.db.exec('CREATE TABLE IF NOT EXISTS rest_bulk (data TEXT)')
  const bulk = host.db.prepare('INSERT INTO rest_bulk (data) VALUES (?)')
  host.db.transaction(() => {
    for (let i = 0; i < 2000; i++) bulk.run('x'.repeat(1000))
  })()
  const commits = () => Number(/^quota_engine_record_commits_total (\d+)$/m.exec(engine.metrics())[1])
  let running = true
  const traffic = (async () => {
    while (running) {
      assert.equal((await enforceQuotaShare(request)).kind, 'allow')
      host.logCall(request.apiKeyId)
      await recordConsumption({ ...request, cost: { requests: 1 } })
      await new Promise((resolve) => setImmediate(resolve))
    }
  })()
  try {
    await new Promise((resolve) => setTimeout(resolve, 100))
    assert.equal(engine.flushQuotaWrites(), null)
    const committed = host.db.prepare('SELECT sum(consumed) AS n FROM quota_consumption WHERE dimension_key = ?').get(dimensionKey).n
    const before = commits()
    const out = path.join(tempDir('backup'), 'backup.sqlite')
    // Every commit of another connection between two steps restarts a backup from its
    // first page (docs/integration.md#backups): one step copies it all at once.
    const backup = host.db.backup(out, { progress: ({ totalPages }) => totalPages })
    const late = new Promise((_, reject) => setTimeout(() => reject(new Error('the backup did not finish within 10 s')), 10_000).unref())
    await Promise.race([backup, late])
    await new Promise((resolve) => setTimeout(resolve, 50))
    assert.ok(commits() > before, 'the engine committed records around the backup')
    const copy = new Database(out, { readonly: true })
    try {
      assert.equal(copy.pragma('integrity_check', { simple: true }), 'ok')
      const copied = copy.prepare('SELECT sum(consumed) AS n FROM quota_consumption WHERE dimension_key = ?').get(dimensionKey).n
      assert.ok(copied >= committed, `the copy holds ${copied}, ${committed} were committed before it`)
      assert.equal(copy.prepare('SELECT count(*) AS n FROM rest_bulk').get().n, 2000)
    } finally {
      copy.close()
    }
  } finally {
    running = false
    await traffic
    host.db.exec('DROP TABLE rest_bulk')
  }
})

test('1,000 closes and reopens beside the host connection: descriptors stay bounded, host locks and records intact', { skip: process.platform !== 'linux' && 'reads /proc' }, async (t) => {
  const p = pool(1e9)
  host.logCall(p.request.apiKeyId)
  await record(p.request)
  assert.equal(engine.flushQuotaWrites(), null)
  const locksBefore = hostLocks(host.file)
  assert.ok(locksBefore.length >= 2, `the host holds its locks: ${locksBefore}`)
  const start = descriptorsOn(host.file)
  const timings = []
  for (let i = 0; i < 1000; i++) {
    const t0 = process.hrtime.bigint()
    engine.closeQuotaDb()
    await enforceQuotaShare(p.request)
    await record(p.request)
    assert.equal(engine.flushQuotaWrites(), null)
    timings.push(Number(process.hrtime.bigint() - t0) / 1e6)
  }
  const end = descriptorsOn(host.file)
  assert.ok(end <= start + 2, `descriptors on the file: ${start} before, ${end} after 1,000 closes`)
  assert.deepEqual(hostLocks(host.file), locksBefore, "the host's locks")
  assert.equal(consumedIn(host.db, p), 1001)
  host.logCall(p.request.apiKeyId)
  assert.equal(host.db.pragma('integrity_check', { simple: true }), 'ok')
  // What a cycle costs at the start and at the end (said, not asserted: no timed tests).
  const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1]
  t.diagnostic(`descriptors ${start} → ${end}; close+reopen median ${median(timings.slice(0, 100)).toFixed(2)} ms (first 100), ${median(timings.slice(-100)).toFixed(2)} ms (last 100)`)
})

// An operator removes the -wal or -shm while the host runs. The host's connection keeps
// using the removed ones; a connection of the engine's SQLite copy opened now would make
// new ones beside it and the host's tables would be written through two WALs (its index
// corrupt, or the file at rest). The engine refuses to open until the host's connection
// closes, then follows.
const away = {
  removed: (file) => fs.rmSync(file),
  moved: (file) => fs.renameSync(file, `${file}.bak`),
}
for (const [how, sidecars] of [['removed', ['-shm']], ['removed', ['-wal']], ['removed', ['-wal', '-shm']], ['moved', ['-wal', '-shm']]]) {
  test(`${sidecars.join(' and ')} ${how} under the host, then the engine reopens: it waits for the host's connection to close, and the file stays whole`, { skip: process.platform !== 'linux' && 'reads /proc' }, async () => {
    const p = pool(1e9)
    await record(p.request, 5)
    assert.equal(engine.flushQuotaWrites(), null)
    // The host's own locks on the file (its connection in WAL mode holds a shared one).
    const ino = fs.statSync(host.file).ino
    const posixLocks = () => fs.readFileSync('/proc/locks', 'utf8').split('\n').filter((l) => / POSIX /.test(l) && l.includes(` ${process.pid} `) && l.includes(`:${ino} `)).map((l) => l.replace(/^\d+:\s*/, ''))
    const locksBefore = posixLocks()
    assert.ok(locksBefore.length > 0, 'the host holds a lock on the file')
    for (const suffix of sidecars) away[how](host.file + suffix)
    engine.closeQuotaDb() // the host's resetter, as its tests and its restore run it
    const logged = host.logs.length
    for (let i = 0; i < 20; i++) {
      assert.equal((await enforceQuotaShare(p.request)).kind, 'allow')
      host.logCall(p.request.apiKeyId)
      await record(p.request)
    }
    const said = host.logs.slice(logged).map((l) => JSON.stringify(l)).join('\n')
    assert.match(said, /is open in this process, but not the -wal and -shm at its path/)
    assert.deepEqual(posixLocks(), locksBefore, "the refusal left the host's locks alone")
    assert.equal(host.db.pragma('integrity_check', { simple: true }), 'ok')
    assert.equal(consumedIn(host.db, p), 5, 'what was recorded while the engine refused is not counted')
    // The host closes and reopens: the engine follows, and counts again.
    host.close()
    host.open()
    await record(p.request, 2)
    assert.equal(engine.flushQuotaWrites(), null)
    assert.equal(consumedIn(host.db, p), 7)
    engine.closeQuotaDb()
    host.close()
    const alone = copyAlone(host.file)
    assert.equal(alone.pragma('integrity_check', { simple: true }), 'ok')
    assert.equal(consumedIn(alone, p), 7)
    alone.close()
    for (const suffix of sidecars) fs.rmSync(`${host.file}${suffix}.bak`, { force: true })
    host.open()
  })
}

// What is safe is not refused: a reader left on the old file across the host's restore
// (its removed sidecars are another file's), and a storage.sqlite that is a link (SQLite
// keeps the sidecars beside the file it leads to).
test("a reader left on the old file across the host's restore, and a file reached through a link: the engine opens and counts", { skip: process.platform !== 'linux' && 'reads /proc' }, async () => {
  const p = pool(1e9)
  await record(p.request, 3)
  assert.equal(engine.flushQuotaWrites(), null)
  const backup = path.join(tempDir('stale'), 'backup.sqlite')
  await host.backup(backup)
  const reader = new Database(host.file, { readonly: true })
  assert.equal(consumedIn(reader, p), 3)
  host.close()
  for (const suffix of ['', '-wal', '-shm']) fs.rmSync(host.file + suffix, { force: true })
  fs.copyFileSync(backup, host.file)
  host.open()
  const logged = host.logs.length
  await record(p.request, 2)
  assert.equal(engine.flushQuotaWrites(), null)
  assert.equal(consumedIn(host.db, p), 5)
  reader.close()
  assert.equal(host.logs.length, logged, JSON.stringify(host.logs.slice(logged)))
  const run = spawnSync(process.execPath, [linkedChild, tempDir('linked')], { encoding: 'utf8', env: process.env })
  assert.equal(run.status, 0, run.stderr)
  assert.deepEqual(JSON.parse(run.stdout), { consumed: 5, logs: [] })
})
