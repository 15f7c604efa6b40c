// The connections managed Redis services ask for (docs/redis.md#tls, #url-forms), against
// real servers started here: `rediss://` to a redis-server listening with `--tls-port` on a
// certificate of a CA made in this test with openssl (so trusted only through the
// engine's settings), with an ACL user; the extra CAs given as Node users give them
// (NODE_EXTRA_CA_CERTS) or by QUOTA_STORE_REDIS_CA_FILE; a server that asks for a client
// certificate; and secrets kept out of every message, log line and doctor report.
import { test, before, after, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import Redis from 'ioredis'
import { makeDataDir } from './support/store-env.mjs'
import { REDIS_SKIP, OPENSSL, makeCertificates, makeSelfSigned, startTlsRedis } from './support/redis-server.mjs'
import { RedisQuotaStore, getRedisClient, resetRedisClient } from '@omniroute/quota-engine/compat/redisQuotaStore'
import { getQuotaStore, resetQuotaStoreSingleton } from '@omniroute/quota-engine/compat/storeFactory'
import { closeQuotaDb, createPool, installHost } from '@omniroute/quota-engine'

const skip = REDIS_SKIP || (!OPENSSL && 'openssl is not on PATH (the TLS tests make their CA with it)')
if (!OPENSSL && process.env.CI) throw new Error('CI must run the TLS tests, but openssl is not on PATH (.ci/run installs it)')
const dataDir = makeDataDir('redis-tls')
const BIN = fileURLToPath(new URL('../bin/quota-engine.js', import.meta.url))
const PASSWORD = 'tls-s3cret-pw'
const ACL = ['--user', 'alice', 'on', `>${PASSWORD}`, '~*', '&*', '+@all']
const logged = []
const logger = {
  warn: (obj, msg) => logged.push(JSON.stringify({ obj, msg })),
  info: (obj, msg) => logged.push(JSON.stringify({ obj, msg })),
  debug() {},
}
const TLS_VARS = ['NODE_EXTRA_CA_CERTS', 'QUOTA_STORE_REDIS_CA_FILE', 'QUOTA_STORE_REDIS_TLS_CERT_FILE', 'QUOTA_STORE_REDIS_TLS_KEY_FILE']
let certs
let server
let mutual
let plain

before(async () => {
  if (skip) return
  // What these tests check is TLS, not speed: the first handshake (the system roots read,
  // a certificate chain checked) took over the default 1 s bound on a loaded 2-core machine.
  process.env.QUOTA_STORE_REDIS_TIMEOUT_MS = '10000'
  installHost({ logger })
  certs = makeCertificates()
  server = await startTlsRedis(certs, { args: ACL })
  mutual = await startTlsRedis(certs, { authClients: true })
  plain = new Redis({ port: server.port, host: '127.0.0.1', username: 'alice', password: PASSWORD })
})

afterEach(() => {
  for (const name of TLS_VARS) delete process.env[name]
  resetRedisClient() // the next case's backends read the settings again
})

after(async () => {
  delete process.env.QUOTA_STORE_REDIS_TIMEOUT_MS
  plain?.disconnect()
  resetRedisClient()
  closeQuotaDb()
  await Promise.all([server, mutual].filter(Boolean).map((s) => s.stop()))
  if (certs) fs.rmSync(certs.dir, { recursive: true, force: true })
  fs.rmSync(dataDir, { recursive: true, force: true })
})

const dim = (poolId) => ({ poolId, unit: 'requests', window: 'hourly' })
const tlsUrl = (port, auth = `alice:${PASSWORD}@`) => `rediss://${auth}127.0.0.1:${port}`

test('rediss:// with an ACL user, the CA from QUOTA_STORE_REDIS_CA_FILE: counters land on the server', { skip }, async () => {
  process.env.QUOTA_STORE_REDIS_CA_FILE = certs.ca
  const store = new RedisQuotaStore(tlsUrl(server.tlsPort))
  assert.equal(await store.consume('k', dim('tls-ca-file'), 2), 2)
  assert.equal(await store.consume('k', dim('tls-ca-file'), 3), 5)
  assert.equal(await store.peek('k', dim('tls-ca-file')), 5)
  // The same key, read over the server's plain port by another client.
  const keys = await plain.keys('omniroute:quota:k:tls-ca-file:*')
  assert.equal(keys.length, 1)
  assert.equal(await plain.get(keys[0]), '5')
  // The connection really is TLS: the server counts it among its TLS clients.
  const client = await getRedisClient(tlsUrl(server.tlsPort))
  assert.equal(await client.ping(), 'PONG')
  const list = await plain.client('LIST')
  assert.ok(/user=alice/.test(list), list)
})

test('the extra CA the way Node users give it: NODE_EXTRA_CA_CERTS', { skip }, async () => {
  process.env.NODE_EXTRA_CA_CERTS = certs.ca
  const store = new RedisQuotaStore(tlsUrl(server.tlsPort))
  assert.equal(await store.consume('k', dim('tls-node-extra'), 1), 1)
})

test('without the CA the server is not trusted: the call rejects, naming the URL without its password', { skip }, async () => {
  const store = new RedisQuotaStore(tlsUrl(server.tlsPort))
  await assert.rejects(store.consume('k', dim('tls-untrusted'), 1), (err) => {
    assert.equal(err.code, 'ERR_QUOTA_REDIS_UNAVAILABLE', err.message)
    assert.match(err.message, new RegExp(`rediss://alice:\\*\\*\\*@127\\.0\\.0\\.1:${server.tlsPort}`))
    assert.match(err.message, /certificate|UnknownIssuer|invalid peer/i)
    assert.ok(!err.message.includes(PASSWORD))
    return true
  })
  assert.equal(await plain.exists('omniroute:quota:k:tls-untrusted:requests:hourly:' + Math.floor(Date.now() / 3_600_000)), 0)
})

test('rediss:// to a server that does not speak TLS: the error says the URL asks for TLS', { skip }, async () => {
  process.env.QUOTA_STORE_REDIS_TIMEOUT_MS = '500'
  try {
    const store = new RedisQuotaStore(tlsUrl(server.port))
    await assert.rejects(store.consume('k', dim('tls-to-plain'), 1), (err) => {
      assert.equal(err.code, 'ERR_QUOTA_REDIS_UNAVAILABLE', err.message)
      assert.match(err.message, /rediss:\/\/ URL: does the server speak TLS on this port\?/)
      assert.ok(!err.message.includes(PASSWORD))
      return true
    })
  } finally {
    process.env.QUOTA_STORE_REDIS_TIMEOUT_MS = '10000'
  }
})

test('redis:// to a port that speaks only TLS: the error asks whether the URL should be rediss://', { skip }, async () => {
  const store = new RedisQuotaStore(`redis://alice:${PASSWORD}@127.0.0.1:${server.tlsPort}`)
  await assert.rejects(store.consume('k', dim('plain-to-tls'), 1), (err) => {
    assert.equal(err.code, 'ERR_QUOTA_REDIS_UNAVAILABLE', err.message)
    assert.match(err.message, /redis:\/\/ URL: does the server take only TLS \(rediss:\/\/\)\?/)
    assert.ok(!err.message.includes(PASSWORD))
    return true
  })
})

test('a CA file that cannot be read fails the connection with a message naming the setting', { skip }, async () => {
  process.env.QUOTA_STORE_REDIS_CA_FILE = path.join(certs.dir, 'missing.pem')
  const store = new RedisQuotaStore(tlsUrl(server.tlsPort))
  await assert.rejects(store.peek('k', dim('tls-missing-ca')), (err) =>
    /QUOTA_STORE_REDIS_CA_FILE=".*missing\.pem": cannot read it/.test(err.message) && !err.message.includes(PASSWORD))
})

test('a wrong ACL password is refused, and the error shows neither password', { skip }, async () => {
  process.env.QUOTA_STORE_REDIS_CA_FILE = certs.ca
  const store = new RedisQuotaStore(tlsUrl(server.tlsPort, 'alice:not-the-password@'))
  await assert.rejects(store.consume('k', dim('tls-wrongpass'), 1), (err) => {
    assert.match(err.message, /WRONGPASS|auth/i)
    assert.ok(!err.message.includes('not-the-password') && !err.message.includes(PASSWORD), err.message)
    return true
  })
})

test('a server that asks for a client certificate: QUOTA_STORE_REDIS_TLS_CERT_FILE / _KEY_FILE', { skip }, async () => {
  process.env.QUOTA_STORE_REDIS_CA_FILE = certs.ca
  const url = tlsUrl(mutual.tlsPort, '')
  await assert.rejects(new RedisQuotaStore(url).consume('k', dim('mtls'), 1), (err) => err.code === 'ERR_QUOTA_REDIS_UNAVAILABLE')
  resetRedisClient()
  process.env.QUOTA_STORE_REDIS_TLS_CERT_FILE = certs.clientCert
  process.env.QUOTA_STORE_REDIS_TLS_KEY_FILE = certs.clientKey
  assert.equal(await new RedisQuotaStore(url).consume('k', dim('mtls'), 1), 1)
})

test('the driver chosen by environment over TLS; a failure to connect is logged with the password masked', { skip }, async () => {
  process.env.QUOTA_STORE_DRIVER = 'redis'
  try {
    process.env.QUOTA_STORE_REDIS_CA_FILE = certs.ca
    process.env.QUOTA_STORE_REDIS_URL = tlsUrl(server.tlsPort)
    resetQuotaStoreSingleton()
    assert.ok((await getQuotaStore()) instanceof RedisQuotaStore)
    // Now the CA is missing: the choice falls back to SQLite, with one warning.
    delete process.env.QUOTA_STORE_REDIS_CA_FILE
    resetRedisClient()
    logged.length = 0
    resetQuotaStoreSingleton()
    const store = await getQuotaStore()
    assert.ok(!(store instanceof RedisQuotaStore), 'falls back to SQLite')
    assert.ok(logged.some((line) => line.includes('quota:factory') && line.includes('rediss://alice:***@')), logged.join('\n'))
    assert.ok(!logged.some((line) => line.includes(PASSWORD)), logged.join('\n'))
  } finally {
    delete process.env.QUOTA_STORE_DRIVER
    delete process.env.QUOTA_STORE_REDIS_URL
    resetQuotaStoreSingleton()
  }
})

test('a self-signed server certificate, trusted through NODE_EXTRA_CA_CERTS: the fallback warning names the cause and the fix', { skip }, async () => {
  const self = makeSelfSigned()
  const selfServer = await startTlsRedis(self)
  process.env.QUOTA_STORE_DRIVER = 'redis'
  try {
    process.env.NODE_EXTRA_CA_CERTS = self.ca
    process.env.QUOTA_STORE_REDIS_URL = `rediss://127.0.0.1:${selfServer.tlsPort}`
    logged.length = 0
    resetQuotaStoreSingleton()
    const store = await getQuotaStore()
    assert.ok(!(store instanceof RedisQuotaStore), 'rustls refuses a CA certificate as the server certificate')
    const warning = logged.find((line) => line.includes('falling back to SQLite'))
    assert.ok(warning, logged.join('\n'))
    assert.match(warning, /CaUsedAsEndEntity/)
    assert.match(warning, /CA certificate .* as its own server certificate/)
    assert.match(warning, /signed by it/)
    assert.match(warning, /NODE_EXTRA_CA_CERTS or QUOTA_STORE_REDIS_CA_FILE/)
  } finally {
    delete process.env.QUOTA_STORE_DRIVER
    delete process.env.QUOTA_STORE_REDIS_URL
    resetQuotaStoreSingleton()
    await selfServer.stop()
    fs.rmSync(self.dir, { recursive: true, force: true })
  }
})

test('doctor masks the password of rediss, cluster and sentinel URLs', { skip }, () => {
  createPool({ connectionId: 'doctor-conn', name: 'doctor' }) // the schema exists
  const db = path.join(dataDir, 'storage.sqlite')
  for (const url of [
    tlsUrl(server.tlsPort),
    `rediss+cluster://alice:${PASSWORD}@127.0.0.1:${server.tlsPort},127.0.0.1:1`,
    `redis+sentinel://alice:${PASSWORD}@127.0.0.1:1,127.0.0.1:2/mymaster`,
  ]) {
    for (const args of [['doctor', '--json'], ['doctor']]) {
      const r = spawnSync(process.execPath, [BIN, '--db', db, ...args, '--timeout', '300'], {
        encoding: 'utf8',
        env: { ...process.env, QUOTA_STORE_DRIVER: 'redis', QUOTA_STORE_REDIS_URL: url },
        timeout: 60_000,
      })
      const out = r.stdout + r.stderr
      assert.ok(out.includes('alice:***@'), out)
      assert.ok(!out.includes(PASSWORD), `${url}: ${out}`)
    }
  }
})
