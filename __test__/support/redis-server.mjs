// Real Redis servers for the tests (never a mock): `redis-server` processes on free
// loopback ports, each in its own temporary directory, stopped by PID when the test file
// ends. Without `redis-server` on PATH the Redis tests are skipped with `REDIS_SKIP` as
// the reason — except under CI (`CI=true`), where .ci/run installs it and a missing
// server is a failure.
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'

function onPath(name) {
  const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' })
  return found.status === 0 ? found.stdout.trim() : null
}

export const REDIS_SERVER = onPath('redis-server')
export const REDIS_CLI = onPath('redis-cli')

/** `false`, or why the Redis tests are skipped (node:test prints it). */
export const REDIS_SKIP = REDIS_SERVER
  ? false
  : 'redis-server is not on PATH (install it: apt-get install -y redis-server); the Redis tests need a real server'

if (!REDIS_SERVER && process.env.CI) {
  throw new Error('CI must run the Redis tests, but redis-server is not on PATH (.ci/run installs it)')
}
if (REDIS_SKIP) process.stderr.write(`# SKIPPED Redis tests: ${REDIS_SKIP}\n`)

function canListen(port) {
  return new Promise((resolve) => {
    const server = net.createServer()
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
  })
}

/** A free loopback port (and, for a cluster node, its bus port `port + 10000` too). */
export async function freePort({ bus = false } = {}) {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = await new Promise((resolve, reject) => {
      const server = net.createServer()
      server.once('error', reject)
      server.listen(0, '127.0.0.1', () => {
        const { port: p } = server.address()
        server.close(() => resolve(p))
      })
    })
    if (!bus) return port
    if (port + 10000 < 65536 && (await canListen(port + 10000))) return port
  }
  throw new Error('no free port pair found')
}

/** Sends one inline command over a fresh TCP connection; resolves to the raw reply. */
export function rawCommand(port, command, timeoutMs = 1000) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    let data = ''
    const timer = setTimeout(() => {
      socket.destroy()
      reject(new Error(`no reply from 127.0.0.1:${port}`))
    }, timeoutMs)
    socket.on('connect', () => socket.write(`${command}\r\n`))
    socket.on('data', (chunk) => {
      data += chunk
      if (data.endsWith('\r\n')) {
        clearTimeout(timer)
        socket.end()
        resolve(data)
      }
    })
    socket.on('error', (err) => {
      clearTimeout(timer)
      reject(err)
    })
  })
}

async function waitFor(check, what, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try {
      if (await check()) return
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/**
 * A `redis-server` on `port` (a free one by default). `stop()` ends it by PID (SIGTERM) and
 * removes its folder, `kill()` ends it with SIGKILL, `start()` starts it again on the same
 * port.
 */
export async function startRedis({ port, args = [] } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-redis-'))
  const server = {
    port: port ?? (await freePort({ bus: args.includes('--cluster-enabled') })),
    dir,
    child: null,
    get url() {
      return `redis://127.0.0.1:${this.port}`
    },
    get pid() {
      return this.child && this.child.pid
    },
    async start() {
      fs.mkdirSync(dir, { recursive: true })
      const child = spawn(
        REDIS_SERVER,
        ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...args],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      )
      let log = ''
      child.stdout.on('data', (b) => { log += b })
      child.stderr.on('data', (b) => { log += b })
      child.exited = new Promise((resolve) => child.once('exit', resolve))
      this.child = child
      try {
        await waitFor(async () => (await rawCommand(this.port, 'PING')).startsWith('+PONG'), `redis-server on ${this.port}`)
      } catch (err) {
        throw new Error(`${err.message}\n${log}`)
      }
      return this
    },
    async kill(signal = 'SIGKILL') {
      const child = this.child
      if (!child || child.exitCode !== null || child.signalCode !== null) return
      process.kill(child.pid, signal)
      await child.exited
    },
    async stop() {
      await this.kill('SIGTERM')
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
  return server.start()
}

/**
 * Three `redis-server --cluster-enabled yes` nodes joined by `redis-cli --cluster create`
 * (no replicas), ready when every node reports `cluster_state:ok`.
 */
export async function startCluster() {
  const nodes = []
  for (let i = 0; i < 3; i++) {
    const port = await freePort({ bus: true })
    nodes.push(
      await startRedis({
        port,
        args: ['--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`, '--cluster-node-timeout', '5000'],
      }),
    )
  }
  const create = spawnSync(
    REDIS_CLI,
    ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'],
    { encoding: 'utf8', timeout: 30_000 },
  )
  if (create.status !== 0) {
    await Promise.all(nodes.map((n) => n.stop()))
    throw new Error(`redis-cli --cluster create failed: ${create.stdout}${create.stderr}`)
  }
  for (const node of nodes) {
    await waitFor(async () => (await rawCommand(node.port, 'CLUSTER INFO')).includes('cluster_state:ok'), `cluster state ok on ${node.port}`)
  }
  return {
    nodes,
    url: `redis+cluster://${nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`,
    stop: () => Promise.all(nodes.map((n) => n.stop())),
  }
}

export const OPENSSL = onPath('openssl')

function openssl(args, cwd) {
  const r = spawnSync(OPENSSL, args, { cwd, encoding: 'utf8', timeout: 30_000 })
  if (r.status !== 0) throw new Error(`openssl ${args.join(' ')} failed: ${r.stderr}`)
}

/**
 * A throwaway CA (made here with openssl, trusted nowhere else), a server certificate for
 * 127.0.0.1/localhost and a client certificate, both signed by it. Returns the PEM paths.
 */
export function makeCertificates() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-tls-'))
  const days = ['-days', '2']
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', ...days, '-subj', '/CN=quota-engine test CA'], dir)
  fs.writeFileSync(path.join(dir, 'server.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n')
  fs.writeFileSync(path.join(dir, 'client.ext'), 'extendedKeyUsage=clientAuth\n')
  for (const who of ['server', 'client']) {
    openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${who}.key`, '-out', `${who}.csr`, '-subj', `/CN=${who}`], dir)
    openssl(['x509', '-req', '-in', `${who}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', `${who}.pem`, ...days, '-extfile', `${who}.ext`], dir)
  }
  const at = (name) => path.join(dir, name)
  return { dir, ca: at('ca.pem'), cert: at('server.pem'), key: at('server.key'), clientCert: at('client.pem'), clientKey: at('client.key') }
}

/** One self-signed certificate (`openssl req -x509`, so a CA certificate) that the server
 * presents itself: many self-hosted setups are made this way. */
export function makeSelfSigned() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-tls-self-'))
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'self.key', '-out', 'self.pem', '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost'], dir)
  const at = (name) => path.join(dir, name)
  return { dir, ca: at('self.pem'), cert: at('self.pem'), key: at('self.key') }
}

/**
 * A `redis-server` that also listens for TLS on `tlsPort` (the plain port stays open for
 * the test's own inspection). `authClients`: whether it asks for a client certificate.
 */
export async function startTlsRedis(certs, { authClients = false, args = [] } = {}) {
  const tlsPort = await freePort()
  const server = await startRedis({
    args: [
      '--tls-port', String(tlsPort),
      '--tls-cert-file', certs.cert,
      '--tls-key-file', certs.key,
      '--tls-ca-cert-file', certs.ca,
      '--tls-auth-clients', authClients ? 'yes' : 'no',
      ...args,
    ],
  })
  server.tlsPort = tlsPort
  return server
}

/**
 * A primary, one replica and three Sentinels (`redis-server --sentinel`, quorum 2)
 * watching it as `master`, with short timeouts so a failover takes about a second or two.
 * Ready when every Sentinel knows the replica and the other Sentinels.
 */
export async function startSentinels({ master = 'mymaster', downAfterMs = 1000 } = {}) {
  const primary = await startRedis()
  const replica = await startRedis({ args: ['--replicaof', '127.0.0.1', String(primary.port)] })
  await waitFor(async () => (await bulk(replica.port, 'INFO replication')).includes('master_link_status:up'), 'the replica in sync')
  const sentinels = []
  for (let i = 0; i < 3; i++) {
    const port = await freePort()
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-sentinel-'))
    const conf = path.join(dir, 'sentinel.conf')
    fs.writeFileSync(conf, [
      `port ${port}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${master} 127.0.0.1 ${primary.port} 2`,
      `sentinel down-after-milliseconds ${master} ${downAfterMs}`,
      `sentinel failover-timeout ${master} 10000`,
      `sentinel parallel-syncs ${master} 1`,
      '',
    ].join('\n'))
    const child = spawn(REDIS_SERVER, [conf, '--sentinel'], { stdio: ['ignore', 'pipe', 'pipe'] })
    child.exited = new Promise((resolve) => child.once('exit', resolve))
    child.stdout.resume()
    child.stderr.resume()
    sentinels.push({ port, dir, child })
    await waitFor(async () => (await rawCommand(port, 'PING')).startsWith('+PONG'), `sentinel on ${port}`)
  }
  for (const s of sentinels) {
    await waitFor(async () => {
      const info = await bulk(s.port, `SENTINEL MASTER ${master}`)
      return /num-other-sentinels\r\n\$1\r\n2\r\n/.test(info) && /num-slaves\r\n\$1\r\n1\r\n/.test(info)
    }, `sentinel ${s.port} discovering the replica and its peers`, 20_000)
  }
  return {
    master,
    primary,
    replica,
    sentinels,
    url: `redis+sentinel://${sentinels.map((s) => `127.0.0.1:${s.port}`).join(',')}/${master}`,
    /** The port the Sentinels name as the primary now. */
    async primaryPort() {
      const reply = await bulk(sentinels[0].port, `SENTINEL GET-MASTER-ADDR-BY-NAME ${master}`)
      return Number(reply.split('\r\n').filter((l) => /^\d+$/.test(l)).pop())
    },
    async stop() {
      for (const s of sentinels) {
        if (s.child.exitCode === null && s.child.signalCode === null) {
          process.kill(s.child.pid, 'SIGTERM')
          await s.child.exited
        }
        fs.rmSync(s.dir, { recursive: true, force: true })
      }
      await Promise.all([primary.stop(), replica.stop()])
    },
  }
}

/** One inline command's whole reply (multi-line, RESP2) over a fresh connection. */
export function bulk(port, command, timeoutMs = 2000) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    let data = ''
    let idle = null
    const timer = setTimeout(() => {
      socket.destroy()
      reject(new Error(`no reply from 127.0.0.1:${port}`))
    }, timeoutMs)
    const done = () => {
      clearTimeout(timer)
      socket.end()
      resolve(data)
    }
    socket.on('connect', () => socket.write(`${command}\r\n`))
    socket.on('data', (chunk) => {
      data += chunk
      clearTimeout(idle)
      idle = setTimeout(done, 30)
    })
    socket.on('error', (err) => {
      clearTimeout(timer)
      reject(err)
    })
  })
}
