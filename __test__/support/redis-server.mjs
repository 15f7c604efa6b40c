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
 * A `redis-server` on `port` (a free one by default). `stop()` ends it by PID (SIGTERM),
 * `kill()` with SIGKILL, `start()` starts it again on the same port.
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
    stop() {
      return this.kill('SIGTERM')
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
