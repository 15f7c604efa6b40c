// The `quota-engine` command against real databases: a host-like storage.sqlite written
// through the engine's API and better-sqlite3 (the host's driver), checked by what the
// commands print — text and --json — and by what they leave on disk.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync, spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import Database from 'better-sqlite3'
import {
  installHost,
  createPool,
  upsertProviderPlan,
  getSqliteQuotaStore,
  incrementBucket,
  closeQuotaDb,
} from '@omniroute/quota-engine'

const BIN = fileURLToPath(new URL('../bin/quota-engine.js', import.meta.url))
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-cli-'))
const dataDir = path.join(root, 'data')
const dbPath = path.join(dataDir, 'storage.sqlite')
const DAY = 86_400_000
let kimiPool
let glmPool

/** The environment without the engine's settings, plus `extra`. */
function envWith(extra = {}) {
  const env = { ...process.env }
  for (const name of Object.keys(env)) if (name.startsWith('QUOTA_') || name === 'DATA_DIR') delete env[name]
  return { ...env, ...extra }
}

function cli(args, { env = {}, cwd = root } = {}) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env: envWith(env), cwd, timeout: 60_000 })
  return { code: r.status, stdout: r.stdout, stderr: r.stderr }
}

/** Like `cli`, without blocking the event loop (for tests that serve a socket meanwhile). */
function cliAsync(args, { env = {} } = {}) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], { env: envWith(env), cwd: root })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => (stdout += d))
    child.stderr.on('data', (d) => (stderr += d))
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

function json(result) {
  assert.equal(result.stderr, '', 'no warnings')
  return JSON.parse(result.stdout)
}

before(() => {
  installHost({ dbPath })
  kimiPool = createPool({
    connectionId: 'conn-kimi',
    connectionIds: ['conn-kimi', 'conn-kimi-2'],
    name: 'Team Kimi',
    allocations: [
      { apiKeyId: 'key-alice', weight: 50, policy: 'hard' },
      { apiKeyId: 'key-bob', weight: 30, policy: 'soft', capValue: 800, capUnit: 'requests' },
      { apiKeyId: 'key-carol', weight: 20, policy: 'burst' },
    ],
  })
  glmPool = createPool({ connectionId: 'conn-glm', name: 'GLM', allocations: [{ apiKeyId: 'key-alice', weight: 100, policy: 'hard' }] })
  upsertProviderPlan({ connectionId: 'conn-glm', provider: 'glm', dimensions: [{ unit: 'tokens', window: '5h', limit: 2_000_000 }], source: 'manual' })
  // A plan row with no dimensions: resolvePlan ignores it and falls back to the catalog.
  return (async () => {
    const store = getSqliteQuotaStore()
    const kimi = { poolId: kimiPool.id, unit: 'requests', window: 'hourly' }
    await store.consume('key-alice', kimi, 700)
    await store.consume('key-bob', kimi, 1200)
    await store.consume('key-carol', kimi, 100)
    await store.consume('key-alice', { poolId: glmPool.id, unit: 'tokens', window: '5h' }, 123_456)
    // A row last written 30 days ago: past the 14-day retention.
    const old = Date.now() - 30 * DAY
    incrementBucket('key-gone', 'gone:requests:hourly', Math.floor(old / 3_600_000), 5, old)
    closeQuotaDb()
    const host = new Database(dbPath)
    host.pragma('journal_mode = WAL')
    host.exec('CREATE TABLE provider_connections (id TEXT PRIMARY KEY, provider TEXT NOT NULL, name TEXT)')
    const insert = host.prepare('INSERT INTO provider_connections (id, provider, name) VALUES (?, ?, ?)')
    insert.run('conn-kimi', 'kimi', 'Kimi 1')
    insert.run('conn-kimi-2', 'kimi', 'Kimi 2')
    insert.run('conn-openai', 'openai', 'OpenAI')
    insert.run('conn-empty', 'deepseek', 'DeepSeek')
    host
      .prepare("INSERT INTO provider_plans (connection_id, provider, dimensions_json, source) VALUES ('conn-empty', 'deepseek', '[]', 'manual')")
      .run()
    host.prepare("INSERT INTO key_value (namespace, key, value) VALUES ('settings', 'quotaStore', ?)").run(JSON.stringify({ driver: 'sqlite' }))
    host.close()
  })()
})

after(() => {
  closeQuotaDb()
  fs.rmSync(root, { recursive: true, force: true })
})

test('--help works for the program and every command', () => {
  const main = cli(['--help'])
  assert.equal(main.code, 0)
  for (const command of ['status', 'plans', 'gc', 'doctor', 'simulate']) assert.match(main.stdout, new RegExp(`^  ${command}\\b`, 'm'))
  assert.match(main.stdout, /--db <path>/)
  for (const [command, option] of [
    ['status', '--pool <id>'],
    ['plans', '--provider <name>'],
    ['gc', '--days <n>'],
    ['doctor', '--timeout <ms>'],
    ['simulate', '--out <file.svg>'],
  ]) {
    const help = cli([command, '--help'])
    assert.equal(help.code, 0, command)
    assert.match(help.stdout, new RegExp(`^Usage: quota-engine ${command}`, 'm'))
    assert.ok(help.stdout.includes(option), `${command} --help lists ${option}`)
    assert.ok(help.stdout.includes('--json'), `${command} --help lists --json`)
  }
  const unknown = cli(['frobnicate'])
  assert.notEqual(unknown.code, 0)
  assert.match(unknown.stderr, /unknown command/)
})

test('a missing database is an error with exit code 2, and nothing is created', () => {
  const missingDir = path.join(root, 'nowhere')
  const missing = path.join(missingDir, 'storage.sqlite')
  for (const command of [['status'], ['plans'], ['gc']]) {
    const r = cli(['--db', missing, ...command])
    assert.equal(r.code, 2, command[0])
    assert.equal(r.stdout, '')
    assert.match(r.stderr, new RegExp(`^quota-engine: no database at ${missing.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`))
  }
  // Through DATA_DIR too.
  const viaEnv = cli(['status'], { env: { DATA_DIR: missingDir } })
  assert.equal(viaEnv.code, 2)
  assert.match(viaEnv.stderr, /no database at .*nowhere/)
  assert.equal(fs.existsSync(missingDir), false, 'neither the file nor its folder was created')

  const doctor = cli(['--db', missing, 'doctor'])
  assert.equal(doctor.code, 2)
  assert.match(doctor.stdout, /✗ no database at/)
  assert.match(doctor.stdout, /Configuration \(docs\/contract\.md §11\)/, 'doctor still reports the configuration')
  assert.equal(fs.existsSync(missingDir), false)
})

test('a directory or a file that is not a database is an error with exit code 2, left untouched', () => {
  const folder = cli(['--db', dataDir, 'status'])
  assert.equal(folder.code, 2)
  assert.match(folder.stderr, /is a directory, not a database file \(did you mean .*storage\.sqlite\?\)/)
  const junk = path.join(root, 'junk.sqlite')
  const content = 'this is not an SQLite file, just some text that is long enough to have a header\n'.repeat(4)
  fs.writeFileSync(junk, content)
  for (const command of ['status', 'doctor']) {
    const r = cli(['--db', junk, command])
    assert.equal(r.code, 2, command)
    assert.match(r.stderr + r.stdout, /not a database/)
  }
  assert.equal(fs.readFileSync(junk, 'utf8'), content)
})

test('status: each pool, its limits scaled by member connections, and every key’s use, share, deficit and borrowing', () => {
  const text = cli(['--db', dbPath, 'status'])
  assert.equal(text.code, 0, text.stderr)
  assert.match(text.stdout, /Pool \S+ {2}"Team Kimi"/)
  assert.match(text.stdout, /connections {2}conn-kimi \(primary\), conn-kimi-2/)
  assert.match(text.stdout, /plan {9}kimi · catalog/)
  assert.match(text.stdout, /requests\/hourly {2}limit 3,000 \(1,500 × 2 connections\) {2}· {2}used 2,000 \(66\.7 %\)/)
  const row = (key) => text.stdout.split('\n').find((l) => l.trim().startsWith(`${key} `)).trim().split(/ {2,}/)
  assert.deepEqual(row('key-alice'), ['key-alice', '50', 'hard', '—', '700', '1,500', '-800', 'no'])
  assert.deepEqual(row('key-bob'), ['key-bob', '30', 'soft', '800 requests', '1,200', '900', '300', 'yes'])
  assert.match(text.stdout, /plan {9}glm · stored row \(manual\)/)
  assert.match(text.stdout, /tokens\/5h {2}limit 2,000,000 {2}· {2}used 123,456 \(6\.2 %\)/)

  const out = json(cli(['--db', dbPath, 'status', '--json']))
  assert.equal(out.database, dbPath)
  const kimi = out.pools.find((p) => p.id === kimiPool.id)
  assert.deepEqual(kimi.plan, { provider: 'kimi', origin: 'catalog', source: 'auto', dimensions: [{ unit: 'requests', window: 'hourly', limit: 1500 }] })
  const [dim] = kimi.dimensions
  assert.equal(dim.limit, 3000)
  assert.equal(dim.planLimit, 1500)
  assert.equal(dim.connections, 2)
  assert.ok(Math.abs(dim.consumedTotal - 2000) < 1e-6)
  const bob = dim.keys.find((k) => k.apiKeyId === 'key-bob')
  assert.equal(bob.fairShare, 900)
  assert.ok(Math.abs(bob.deficit - 300) < 1e-6)
  assert.equal(bob.borrowing, true)
  assert.equal(bob.capValue, 800)
  const only = json(cli(['--db', dbPath, 'status', '--json', '--pool', glmPool.id]))
  assert.deepEqual(only.pools.map((p) => p.id), [glmPool.id])
  const none = cli(['--db', dbPath, 'status', '--pool', 'no-such-pool'])
  assert.equal(none.code, 1)
  assert.match(none.stderr, /no pool with id "no-such-pool"/)
})

test('status reads DATA_DIR when --db is not given', () => {
  const out = json(cli(['status', '--json'], { env: { DATA_DIR: dataDir } }))
  assert.equal(out.database, dbPath)
  assert.equal(out.pools.length, 2)
})

test('plans: each connection’s resolved plan and where it came from', () => {
  const text = cli(['--db', dbPath, 'plans'])
  assert.equal(text.code, 0, text.stderr)
  const row = (id) => text.stdout.split('\n').find((l) => l.startsWith(`${id} `)).split(/ {2,}/)
  assert.deepEqual(row('conn-glm').slice(0, 4), ['conn-glm', 'glm', 'stored row (manual)', 'tokens/5h 2,000,000'])
  assert.deepEqual(row('conn-kimi').slice(0, 4), ['conn-kimi', 'kimi', 'catalog', 'requests/hourly 1,500'])
  assert.deepEqual(row('conn-kimi-2').slice(0, 4), ['conn-kimi-2', 'kimi', 'catalog', 'requests/hourly 1,500'])
  assert.deepEqual(row('conn-openai').slice(0, 4), ['conn-openai', 'openai', 'none', '— (not limited)'])
  // An empty stored row is ignored: deepseek's catalog plan (ε: not enforced) applies.
  assert.deepEqual(row('conn-empty').slice(0, 4), ['conn-empty', 'deepseek', 'catalog', 'usd/monthly ε (unknown)'])
  assert.match(text.stdout, /conn-empty: its provider_plans row has no dimensions, so it is ignored/)

  const out = json(cli(['--db', dbPath, 'plans', '--json']))
  const byId = Object.fromEntries(out.plans.map((p) => [p.connectionId, p]))
  assert.deepEqual(Object.keys(byId).sort(), ['conn-empty', 'conn-glm', 'conn-kimi', 'conn-kimi-2', 'conn-openai'])
  assert.equal(byId['conn-glm'].origin, 'stored')
  assert.equal(byId['conn-glm'].source, 'manual')
  assert.deepEqual(byId['conn-kimi'].pools, [kimiPool.id])
  assert.equal(byId['conn-openai'].origin, 'none')

  const asked = json(cli(['--db', dbPath, 'plans', '--json', 'conn-new', '--provider', 'alibaba']))
  assert.deepEqual(asked.plans.map((p) => [p.connectionId, p.provider, p.origin]), [['conn-new', 'alibaba', 'catalog']])
  assert.deepEqual(asked.plans[0].dimensions, [{ unit: 'requests', window: 'monthly', limit: 90000 }])
  const unknown = json(cli(['--db', dbPath, 'plans', '--json', 'conn-mystery']))
  assert.equal(unknown.plans[0].origin, 'none')
  assert.match(unknown.plans[0].notes.join(' '), /provider unknown/)
})

test('gc deletes the rows past retention, and only those', () => {
  const bad = cli(['--db', dbPath, 'gc', '--days', 'soon'])
  assert.equal(bad.code, 1)
  assert.match(bad.stderr, /--days must be a number/)
  const first = json(cli(['--db', dbPath, 'gc', '--json']))
  assert.equal(first.retentionDays, 14)
  assert.equal(first.deleted, 1)
  assert.equal(first.rowsBefore, 5)
  const second = cli(['--db', dbPath, 'gc'])
  assert.equal(second.code, 0)
  assert.match(second.stdout, /^Deleted 0 of 4 counter rows not updated in the last 14 days \(QUOTA_CONSUMPTION_RETENTION_DAYS\)\.$/m)
  const fromEnv = json(cli(['--db', dbPath, 'gc', '--json'], { env: { QUOTA_CONSUMPTION_RETENTION_DAYS: '30' } }))
  assert.equal(fromEnv.retentionDays, 30)
  assert.equal(fromEnv.deleted, 0)
})

test('doctor: schema, driver choice and why, configuration with the invalid values named', () => {
  const r = cli(['--db', dbPath, 'doctor', '--json'], {
    env: { QUOTA_SATURATION_THRESHOLD: '2', QUOTA_SOFT_DEPRIORITIZE_FACTOR: '3', QUOTA_STORE_DRIVER: 'redis' },
  })
  assert.equal(r.code, 1)
  const report = JSON.parse(r.stdout)
  assert.equal(report.database.path, dbPath)
  assert.equal(report.database.source, '--db')
  assert.equal(report.database.schemaVersion, '12/12')
  assert.equal(report.database.journalMode, 'wal')
  assert.ok(report.database.migrations.every((m) => m.applied))
  assert.ok(report.database.tables.includes('provider_connections'))
  // The host's setting wins over QUOTA_STORE_DRIVER.
  assert.equal(report.driver.configured, 'sqlite')
  assert.equal(report.driver.driverSource, 'key_value settings/quotaStore')
  assert.equal(report.driver.effective, 'sqlite')
  const setting = (name) => report.config.find((s) => s.name === name)
  assert.equal(setting('QUOTA_SATURATION_THRESHOLD').valid, false)
  assert.equal(setting('QUOTA_SATURATION_THRESHOLD').value, 0.5)
  assert.equal(setting('QUOTA_SOFT_DEPRIORITIZE_FACTOR').value, 1)
  assert.equal(setting('QUOTA_CONSUMPTION_RETENTION_DAYS').valid, true)
  assert.deepEqual(report.problems, [
    'QUOTA_SATURATION_THRESHOLD="2" is not a number in 0..1; the default 0.5 is used',
    'QUOTA_SOFT_DEPRIORITIZE_FACTOR="3" is outside 0..1; clamped to 1',
  ])
  const text = cli(['--db', dbPath, 'doctor'])
  assert.equal(text.code, 0, text.stdout)
  assert.match(text.stdout, /schema {8}12\/12 engine migrations applied/)
  assert.match(text.stdout, /chosen {8}sqlite\n {2}why {11}from key_value settings\/quotaStore/)
  assert.match(text.stdout, /Result: no problems found\./)
})

test('doctor finds counters poisoned by an older version (Infinity, negative); doctor --repair fixes them', () => {
  const file = path.join(root, 'poisoned.sqlite')
  new Database(file).close()
  assert.equal(cli(['--db', file, 'gc', '--json']).code, 0) // the engine's open creates the schema
  const host = new Database(file)
  const insert = host.prepare('INSERT INTO quota_consumption (api_key_id, dimension_key, bucket_index, consumed, updated_at) VALUES (?,?,?,?,?)')
  insert.run('a', 'p:tokens:daily', 5, Infinity, Date.now())
  insert.run('b', 'p:tokens:daily', 5, Infinity, Date.now())
  insert.run('c', 'p:tokens:daily', 5, -39, Date.now())
  // What an older version's triggers left: an infinite pool total.
  host.prepare("UPDATE quota_consumption_totals SET consumed = ? WHERE dimension_key = 'p:tokens:daily'").run(Infinity)
  host.close()
  const found = cli(['--db', file, 'doctor', '--json'])
  assert.equal(found.code, 1, found.stdout)
  const report = JSON.parse(found.stdout)
  assert.deepEqual(report.database.poisonedCounters, { rows: 3, totals: 1 })
  assert.ok(report.problems.some((p) => /3 counter rows of quota_consumption and 1 row of quota_consumption_totals .*doctor --repair/.test(p)), report.problems.join('\n'))
  const repaired = cli(['--db', file, 'doctor', '--repair'])
  assert.equal(repaired.code, 0, repaired.stdout + repaired.stderr)
  assert.match(repaired.stdout, /repaired {6}3 counter rows of quota_consumption and 1 row of quota_consumption_totals: saturated into 0\.\.1e15/)
  const again = JSON.parse(cli(['--db', file, 'doctor', '--json']).stdout)
  assert.deepEqual(again.database.poisonedCounters, { rows: 0, totals: 0 })
  const check = new Database(file)
  assert.deepEqual(check.prepare('SELECT api_key_id AS k, consumed AS v FROM quota_consumption ORDER BY 1').all(), [{ k: 'a', v: 1e15 }, { k: 'b', v: 1e15 }, { k: 'c', v: 0 }])
  assert.deepEqual(check.prepare('SELECT consumed, row_count FROM quota_consumption_totals').all(), [{ consumed: 2e15, row_count: 3 }])
  check.close()
})

test('doctor reads a host database without migrating it', () => {
  const hostOnly = path.join(root, 'host-only.sqlite')
  const host = new Database(hostOnly)
  host.pragma('journal_mode = WAL')
  host.exec("CREATE TABLE key_value (namespace TEXT, key TEXT, value TEXT, PRIMARY KEY (namespace, key)); INSERT INTO key_value VALUES ('settings', 'quotaStore', '{not json')")
  const schema = () => host.prepare('SELECT type, name FROM sqlite_master ORDER BY name').all()
  const before = schema()
  const r = cli(['--db', hostOnly, 'doctor', '--json'])
  const report = JSON.parse(r.stdout)
  assert.equal(report.database.schemaVersion, '1/12')
  const kv = report.database.migrations.find((m) => m.name === '0005_key_value.sql')
  assert.equal(kv.applied, true)
  const first = report.database.migrations[0]
  assert.equal(first.applied, false)
  assert.deepEqual(first.missing, ['quota_consumption', 'idx_quota_consumption_dim_bucket', 'idx_quota_consumption_updated_at'])
  assert.ok(report.problems.includes('the settings/quotaStore value is not valid JSON; it is ignored'))
  assert.equal(r.code, 1)
  assert.deepEqual(schema(), before, 'no table, index or trigger was created')
  host.close()
})

test('doctor: Redis reachability by TCP connect and PING, and unreachable servers', async () => {
  const fresh = path.join(root, 'fresh.sqlite')
  new Database(fresh).close()
  const server = net.createServer((socket) => socket.once('data', () => socket.end('+PONG\r\n')))
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()
  try {
    const r = await cliAsync(['--db', fresh, 'doctor', '--json'], {
      env: { QUOTA_STORE_DRIVER: 'redis', QUOTA_STORE_REDIS_URL: `redis://user:hunter2@127.0.0.1:${port}/0` },
    })
    const report = JSON.parse(r.stdout)
    assert.equal(report.driver.configured, 'redis')
    assert.equal(report.driver.driverSource, 'env QUOTA_STORE_DRIVER')
    assert.equal(report.driver.redisUrl, `redis://user:***@127.0.0.1:${port}/0`)
    assert.equal(report.redis.reachable, true)
    assert.equal(report.redis.reply, '+PONG')
    assert.ok(!r.stdout.includes('hunter2'), 'the password is masked')
    assert.ok(!report.problems.some((p) => /unreachable/.test(p)))
  } finally {
    await new Promise((resolve) => server.close(resolve))
  }
  // The same port, now closed.
  const down = await cliAsync(['--db', fresh, 'doctor', '--json', '--timeout', '500'], {
    env: { QUOTA_STORE_DRIVER: 'redis', QUOTA_STORE_REDIS_URL: `redis://127.0.0.1:${port}` },
  })
  const report = JSON.parse(down.stdout)
  assert.equal(down.code, 1)
  assert.equal(report.redis.reachable, false)
  assert.ok(report.problems.some((p) => p.startsWith(`Redis at 127.0.0.1:${port} is unreachable`)), report.problems.join('\n'))
  const badUrl = JSON.parse(cli(['--db', fresh, 'doctor', '--json'], { env: { QUOTA_STORE_REDIS_URL: 'http://example' } }).stdout)
  assert.equal(badUrl.config.find((s) => s.name === 'QUOTA_STORE_REDIS_URL').valid, false)
  // The driver's own URL check decides: TLS, cluster and Sentinel URLs are fine (docs/redis.md#url-forms);
  // a Sentinel URL without its master name is not.
  const tls = JSON.parse(cli(['--db', fresh, 'doctor', '--json'], { env: { QUOTA_STORE_REDIS_URL: 'rediss://127.0.0.1:1' } }).stdout)
  assert.equal(tls.config.find((s) => s.name === 'QUOTA_STORE_REDIS_URL').problem, null)
  assert.equal(tls.redis.tls, true)
  const sentinel = JSON.parse(cli(['--db', fresh, 'doctor', '--json'], { env: { QUOTA_STORE_REDIS_URL: 'redis+sentinel://127.0.0.1:1,127.0.0.1:2/mymaster' } }).stdout)
  assert.equal(sentinel.config.find((s) => s.name === 'QUOTA_STORE_REDIS_URL').problem, null)
  assert.equal(sentinel.redis.port, 1)
  const noMaster = JSON.parse(cli(['--db', fresh, 'doctor', '--json'], { env: { QUOTA_STORE_REDIS_URL: 'redis+sentinel://127.0.0.1:1' } }).stdout)
  assert.match(noMaster.config.find((s) => s.name === 'QUOTA_STORE_REDIS_URL').problem, /names its master/)
  const cluster = JSON.parse(cli(['--db', fresh, 'doctor', '--json'], { env: { QUOTA_STORE_REDIS_URL: 'redis+cluster://127.0.0.1:1,127.0.0.1:2' } }).stdout)
  assert.equal(cluster.config.find((s) => s.name === 'QUOTA_STORE_REDIS_URL').valid, true)
})
