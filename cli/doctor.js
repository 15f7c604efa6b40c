'use strict'
// `quota-engine doctor`: what the engine would use and what is wrong with it — the
// database (path, schema, without writing to it), the store driver and why it is chosen
// (docs/contract.md §4), Redis reachability, and the effective configuration of docs/contract.md §11.
// Exit code: 0 healthy, 1 problems found, 2 database missing or unreadable.
const fs = require('node:fs')
const net = require('node:net')
const path = require('node:path')
const native = require('../lib/native.js')
const host = require('../lib/host.js')
const db = require('./database.js')
const { formatNumber, table } = require('./format.js')

const DRIVERS = ['sqlite', 'redis']

/**
 * The driver `getQuotaStore()` chooses and why: the host's `key_value` setting
 * (`settings`/`quotaStore`, JSON `{ driver?, redisUrl? }`), then the environment, then
 * `sqlite` — each field on its own.
 */
function chooseDriver(settingRaw) {
  // The engine's own reading of the setting and the environment (src/engine/driver.rs).
  return native.describeStoreChoice(settingRaw ?? null)
}

/**
 * The first server of a URL the Redis driver accepts (checked by the driver itself, so
 * `doctor` and the engine agree: `redis://`, `redis+cluster://h1:p1,h2:p2`; no TLS in this
 * build), or `{ error }` saying why the driver would refuse it.
 */
function parseRedisUrl(url) {
  try {
    const info = native.redisTarget(url)
    const rest = url.replace(/^[a-z+]+:\/\//i, '').replace(/^[^@/]*@/, '')
    const first = rest.split(/[/,?]/)[0]
    const match = /^\[?([^\]]+?)\]?(?::(\d+))?$/.exec(first)
    if (!match) return { error: 'no host in the URL' }
    const sentinel = /^rediss?\+sentinel:/i.test(url)
    return {
      host: match[1],
      port: Number(match[2] || (sentinel ? 26379 : 6379)),
      tls: /^rediss/i.test(url),
      cluster: info.cluster,
      sentinel,
    }
  } catch (err) {
    return { error: String(err.message).replace(/^url: /, '') }
  }
}

/**
 * A TCP connect to the Redis server within `timeoutMs`; on a plain connection also a
 * `PING`, to tell a Redis server (`+PONG`, or `-NOAUTH` when it wants a password) from
 * another service. Never rejects.
 */
function probeRedis(target, timeoutMs) {
  return new Promise((resolve) => {
    const started = Date.now()
    const socket = net.connect({ host: target.host, port: target.port })
    let connectedMs = null
    let settled = false
    const finish = (result) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      socket.destroy()
      resolve({ ...result, connectMs: connectedMs })
    }
    const timer = setTimeout(() => {
      if (connectedMs === null) finish({ reachable: false, error: `no TCP connection within ${timeoutMs} ms` })
      else finish({ reachable: true, reply: null })
    }, timeoutMs)
    socket.once('connect', () => {
      connectedMs = Date.now() - started
      if (target.tls) finish({ reachable: true, reply: null })
      else socket.write('PING\r\n')
    })
    socket.once('data', (data) => finish({ reachable: true, reply: data.toString('utf8').split('\r\n')[0] }))
    socket.once('error', (err) => finish({ reachable: connectedMs !== null, error: err.code || err.message }))
  })
}

function describeDriverSetting(env) {
  const driver = env.QUOTA_STORE_DRIVER
  const url = env.QUOTA_STORE_REDIS_URL
  return [
    {
      name: 'QUOTA_STORE_DRIVER',
      raw: driver ?? null,
      value: driver || 'sqlite',
      valid: !driver || DRIVERS.includes(driver),
      rule: 'sqlite or redis',
      problem: !driver || DRIVERS.includes(driver) ? null : 'is neither sqlite nor redis; SQLite is used',
    },
    {
      name: 'QUOTA_STORE_REDIS_URL',
      raw: url ? host.maskSecrets(url) : null,
      value: url ? host.maskSecrets(url) : '',
      valid: !url || !parseRedisUrl(url).error,
      rule: 'redis[s]://[user:password@]host[:port][/db], redis[s]+cluster://host:port,host:port or redis[s]+sentinel://host:port,host:port/master',
      problem: !url || !parseRedisUrl(url).error ? null : parseRedisUrl(url).error,
    },
  ]
}

/** Every §11 setting as the environment has it: `{ name, raw, value, valid, rule }`. */
function describeConfig(env = process.env) {
  // The engine's own reading of the settings (it parses and validates them, in one place).
  const numeric = native.describeSettings().map((s) => ({
    name: s.name,
    raw: s.raw,
    value: s.value,
    valid: s.valid,
    rule: `a number in ${s.min}..${s.max}, default ${s.default}`,
    problem: s.valid
      ? null
      : s.clamped
        ? `is outside ${s.min}..${s.max}; clamped to ${s.value}`
        : `is not a number in ${s.min}..${s.max}; the default ${s.default} is used`,
  }))
  const dataDir = env.DATA_DIR
  let dataDirValid = true
  if (dataDir) {
    try {
      dataDirValid = fs.statSync(dataDir).isDirectory()
    } catch {
      dataDirValid = false
    }
  }
  return [
    ...describeDriverSetting(env),
    ...numeric,
    {
      name: 'DATA_DIR',
      raw: dataDir ?? null,
      value: dataDir || path.dirname(native.defaultDbPath()),
      valid: dataDirValid,
      rule: 'an existing folder holding storage.sqlite',
      problem: dataDirValid ? null : 'is not an existing folder',
    },
  ]
}

/** `{ rows, totals }` poisoned (outside 0..1e15) as one phrase, or null when none. */
function describePoisoned(poisoned) {
  if (!poisoned || (poisoned.rows === 0 && poisoned.totals === 0)) return null
  const parts = []
  if (poisoned.rows) parts.push(`${poisoned.rows} counter row${poisoned.rows === 1 ? '' : 's'} of quota_consumption`)
  if (poisoned.totals) parts.push(`${poisoned.totals} row${poisoned.totals === 1 ? '' : 's'} of quota_consumption_totals`)
  return parts.join(' and ')
}

/**
 * Collects the report (as data) for `database`. With `repair`, counters poisoned by older
 * versions (Infinity, negative, text: docs/reliability.md, "Finite counters") are repaired
 * through the engine's own open of the file — the only write `doctor` makes.
 */
async function collectDoctor(database, { timeoutMs = 1000, env = process.env, repair = false } = {}) {
  const problems = []
  const report = { database: { path: database.path, source: database.source }, problems }

  const fileProblem = db.problemWith(database.path)
  let inspection = null
  if (fileProblem) {
    report.database.error = fileProblem
  } else {
    const stat = fs.statSync(database.path)
    report.database.sizeBytes = stat.size
    try {
      fs.accessSync(database.path, fs.constants.W_OK)
      report.database.writable = true
    } catch {
      report.database.writable = false
      problems.push(`${database.path} is not writable by this user: the engine opens it read-write`)
    }
    try {
      inspection = native.inspectDatabase(database.path)
    } catch (err) {
      report.database.error = `cannot read ${database.path}: ${err.message.replace(/^quota store error: /, '')}`
    }
  }
  if (inspection) {
    const applied = inspection.migrations.filter((m) => m.applied).length
    report.database.sqliteVersion = inspection.sqliteVersion
    report.database.journalMode = inspection.journalMode
    report.database.userVersion = inspection.userVersion
    report.database.tables = inspection.tables
    report.database.migrations = inspection.migrations
    report.database.schemaVersion = `${applied}/${inspection.migrations.length}`
    report.database.counterRows = inspection.counterRows ?? null
    report.database.planRows = inspection.planRows.length
    report.database.poisonedCounters = inspection.poisonedCounters ?? null
    const poisoned = describePoisoned(inspection.poisonedCounters)
    if (poisoned && repair) {
      try {
        db.openEngine(database)
        report.database.repaired = native.repairCounters()
        db.closeEngine()
        const after = native.inspectDatabase(database.path).poisonedCounters
        report.database.poisonedCounters = after ?? null
        const left = describePoisoned(after)
        if (left) problems.push(`${left} still hold a value outside 0..1e15 after the repair`)
      } catch (err) {
        problems.push(`repairing ${poisoned} failed: ${err.message}`)
      }
    } else if (poisoned) {
      problems.push(
        `${poisoned} hold a value outside 0..1e15 (Infinity or negative, from an older version): run quota-engine doctor --repair`,
      )
    }
  }

  const choice = chooseDriver(inspection ? inspection.quotaStoreSetting : null)
  problems.push(...choice.problems)
  const redisSupported = typeof require('../index.js').RedisQuotaStore === 'function'
  report.driver = {
    configured: choice.driver.value,
    driverSource: choice.driver.source,
    effective: choice.effective === 'redis' && !redisSupported ? 'sqlite' : choice.effective,
    setting: choice.setting == null ? null : host.maskSecrets(choice.setting),
    redisUrl: choice.redisUrl.value ? host.maskSecrets(choice.redisUrl.value) : null,
    redisUrlSource: choice.redisUrl.value ? choice.redisUrl.source : null,
    redisSupported,
  }
  if (choice.effective === 'redis' && !redisSupported) {
    problems.push('driver redis is configured, but this build has no Redis driver: getQuotaStore() falls back to SQLite')
  }
  if (choice.redisUrl.value) {
    const target = parseRedisUrl(choice.redisUrl.value)
    if (target.error) {
      report.redis = { checked: false, error: target.error }
      if (choice.redisUrl.source !== 'env QUOTA_STORE_REDIS_URL') {
        problems.push(`the Redis URL ${host.maskSecrets(choice.redisUrl.value)} is not usable: ${target.error}`)
      }
    } else {
      const probe = await probeRedis(target, timeoutMs)
      report.redis = { checked: true, host: target.host, port: target.port, tls: target.tls, ...probe }
      // Only a problem when Redis is the chosen driver; otherwise the URL is unused.
      const inUse = choice.effective === 'redis'
      report.redis.inUse = inUse
      if (inUse && !probe.reachable) {
        problems.push(`Redis at ${target.host}:${target.port} is unreachable (${probe.error})`)
      } else if (inUse && probe.reply && !/^(\+PONG|-NOAUTH|-WRONGPASS|-ERR)/.test(probe.reply)) {
        problems.push(`${target.host}:${target.port} accepted a connection but did not answer PING like Redis`)
      }
    }
  } else {
    report.redis = { checked: false }
  }

  report.config = describeConfig(env)
  // The host's setting wins over the environment field by field (docs/contract.md §4).
  for (const [name, picked] of [
    ['QUOTA_STORE_DRIVER', choice.driver],
    ['QUOTA_STORE_REDIS_URL', choice.redisUrl],
  ]) {
    const entry = report.config.find((s) => s.name === name)
    if (entry && picked.source.startsWith('key_value')) {
      entry.value = `${host.maskSecrets(picked.value)} (the key_value setting wins)`
    }
  }
  for (const setting of report.config) {
    if (setting.problem) problems.push(`${setting.name}=${JSON.stringify(setting.raw)} ${setting.problem}`)
  }
  report.exitCode = report.database.error ? 2 : problems.length ? 1 : 0
  return report
}

/** `items` joined with ", " into lines of at most `width` characters. */
function wrapList(items, width) {
  const lines = []
  let line = ''
  for (const item of items) {
    const next = line ? `${line}, ${item}` : item
    if (line && next.length > width) {
      lines.push(`${line},`)
      line = item
    } else line = next
  }
  if (line) lines.push(line)
  return lines
}

function renderDoctor(report) {
  const out = []
  const d = report.database
  out.push('Database')
  out.push(`  path          ${d.path}  (from ${d.source})`)
  if (d.error) out.push(`  ✗ ${d.error}`)
  else {
    out.push(`  file          ${formatNumber(d.sizeBytes / 1024, 1)} KiB, ${d.writable ? 'readable and writable' : 'read-only'}`)
    out.push(`  SQLite        ${d.sqliteVersion} (the engine's bundled copy) · journal_mode ${d.journalMode} · user_version ${d.userVersion}`)
    out.push(`  schema        ${d.schemaVersion} engine migrations applied`)
    for (const m of d.migrations) {
      const mark = m.applied ? '✓' : '✗'
      const detail = m.applied ? '' : ` — missing ${m.missing.join(', ')}`
      out.push(`                ${mark} ${m.name}${detail}`)
    }
    if (d.migrations.some((m) => !m.applied)) {
      out.push('                (the engine creates what is missing when it first opens the file)')
    }
    const tables = d.tables.length ? wrapList(d.tables, 80) : ['(none)']
    out.push(`  tables        ${tables[0]}`, ...tables.slice(1).map((line) => `                ${line}`))
    if (d.counterRows !== null) out.push(`  counters      ${formatNumber(d.counterRows, 0)} rows in quota_consumption`)
    if (d.repaired) {
      const fixed = describePoisoned(d.repaired)
      out.push(`  repaired      ${fixed ? `${fixed}: saturated into 0..1e15, pool totals recomputed` : 'nothing to repair'}`)
    }
  }
  out.push('')
  const r = report.driver
  out.push('Store driver')
  out.push(`  chosen        ${r.effective}${r.effective !== r.configured ? ` (configured: ${r.configured})` : ''}`)
  out.push(`  why           ${r.driverSource === 'default' ? 'no setting and no QUOTA_STORE_DRIVER: the default' : `from ${r.driverSource}`}`)
  out.push(`  setting       key_value settings/quotaStore = ${r.setting === null ? '(none)' : r.setting}`)
  if (r.redisUrl) out.push(`  redis url     ${r.redisUrl} (from ${r.redisUrlSource})`)
  const redis = report.redis
  if (!redis.checked) out.push(`  redis         ${redis.error ? `not checked: ${redis.error}` : 'not checked (no URL configured)'}`)
  else if (redis.reachable) {
    const reply = redis.reply ? `, answered PING with ${redis.reply}` : redis.tls ? ' (TLS: TCP connect only)' : ''
    out.push(`  redis         reachable at ${redis.host}:${redis.port} (TCP connect ${redis.connectMs} ms)${reply}`)
  } else {
    const unused = redis.inUse ? '' : ' (not in use: the driver is sqlite)'
    out.push(`  redis         ${redis.inUse ? '✗ ' : ''}unreachable at ${redis.host}:${redis.port}: ${redis.error}${unused}`)
  }
  out.push('')
  out.push('Configuration (docs/contract.md §11)')
  out.push(
    ...table(
      [{ title: 'variable' }, { title: 'set to' }, { title: 'in effect' }, { title: 'check' }],
      report.config.map((s) => [
        s.name,
        s.raw === null ? '(unset)' : JSON.stringify(s.raw),
        String(s.value),
        s.valid ? 'ok' : `✗ ${s.rule}`,
      ]),
      { indent: '  ' },
    ),
  )
  out.push('')
  const count = report.problems.length
  if (report.database.error) out.push(`Result: the database cannot be used${count ? `, and ${count} more problem${count === 1 ? '' : 's'}` : ''}`)
  else if (count === 0) out.push('Result: no problems found.')
  else out.push(`Result: ${count} problem${count === 1 ? '' : 's'}`)
  if (report.database.error) out.push(`  ✗ ${report.database.error}`)
  for (const p of report.problems) out.push(`  ✗ ${p}`)
  return out.join('\n')
}

/** The `doctor` command. */
async function doctorCommand(options, dbOption) {
  const database = db.resolveDatabase(dbOption)
  const report = await collectDoctor(database, { timeoutMs: options.timeout, repair: Boolean(options.repair) })
  if (options.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`)
  else process.stdout.write(`${renderDoctor(report)}\n`)
  return report.exitCode
}

module.exports = { doctorCommand, collectDoctor, chooseDriver, describeConfig, probeRedis, parseRedisUrl }
