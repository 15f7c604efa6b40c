// `quota-engine simulate`: the summary shows the steady keys keep their share while the
// burst key is held, and the chart is a well-formed SVG with the series and legend a
// reader needs. The run uses the real engine on a temporary database, removed afterwards.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseXml, walk, textOf } from './support/xml.mjs'

const BIN = fileURLToPath(new URL('../bin/quota-engine.js', import.meta.url))
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qe-simulate-'))

after(() => fs.rmSync(dir, { recursive: true, force: true }))

function simulate(args) {
  const env = { ...process.env }
  for (const name of Object.keys(env)) if (name.startsWith('QUOTA_') || name === 'DATA_DIR') delete env[name]
  const r = spawnSync(process.execPath, [BIN, 'simulate', ...args], { encoding: 'utf8', env, cwd: dir, timeout: 120_000 })
  return { code: r.status, stdout: r.stdout, stderr: r.stderr }
}

function simTempDirs() {
  return fs.readdirSync(os.tmpdir()).filter((name) => name.startsWith('quota-engine-sim-'))
}

test('kimi: the steady keys get every call, the burst key is blocked for fair share', () => {
  const before = simTempDirs()
  const out = path.join(dir, 'kimi.svg')
  const r = simulate(['--json', '--out', out])
  assert.equal(r.code, 0, r.stderr)
  assert.equal(r.stderr, '', 'no progress bar and no warnings when stderr is not a terminal')
  const summary = JSON.parse(r.stdout)
  assert.equal(summary.provider, 'kimi')
  assert.deepEqual(summary.chart, { unit: 'requests', window: 'hourly', limit: 1500, windowMs: 3_600_000 })
  assert.equal(summary.plan.origin, 'catalog')
  assert.equal(summary.chartFile, out)
  const [a, b, burst] = summary.keys
  for (const steady of [a, b]) {
    assert.equal(steady.role, 'steady')
    assert.ok(steady.attempted > 300, `${steady.id} made calls`)
    assert.equal(steady.admitted, steady.attempted, `${steady.id} got every call`)
    assert.equal(steady.blockedTotal, 0)
  }
  assert.equal(burst.role, 'burst')
  assert.ok(burst.attempted > 4 * burst.admitted, 'most burst calls were refused')
  assert.equal(burst.blocked['fair-share'], burst.blockedTotal, 'every block was a fair-share block')
  assert.equal(burst.admitted + burst.blockedTotal, burst.attempted)
  // Held near its share: it borrowed only while the pool was below the threshold.
  assert.ok(burst.endUse < summary.strictAt, `burst use ${burst.endUse} < ${summary.strictAt}`)
  assert.ok(summary.poolEnd <= 1500)
  const shares = summary.keys.reduce((s, k) => s + k.share, 0)
  assert.ok(Math.abs(shares - 1) < 1e-9)
  assert.deepEqual(simTempDirs(), before, 'the temporary database was removed')
})

test('the chart is a well-formed SVG with axes, one path per series, a legend and a title', () => {
  const file = path.join(dir, 'kimi.svg')
  const text = fs.readFileSync(file, 'utf8')
  const svg = parseXml(text)
  assert.equal(svg.name, 'svg')
  assert.equal(svg.attrs.xmlns, 'http://www.w3.org/2000/svg')
  assert.ok(Number(svg.attrs.width) >= 800 && Number(svg.attrs.height) >= 400)
  const elements = [...walk(svg)]
  const series = elements.filter((e) => e.name === 'path' && e.attrs.class === 'series')
  assert.deepEqual(series.map((p) => p.attrs['data-series']), ['pool', 'key-1', 'key-2', 'key-3'])
  for (const path of series) {
    const points = path.attrs.d.match(/[ML]-?[\d.]+ -?[\d.]+/g)
    assert.equal(points.length, 241, 'one point per sample')
    assert.match(path.attrs.d, /^M[\d.]+ [\d.]+( L[\d.]+ [\d.]+)+$/)
  }
  const legend = elements.find((e) => e.attrs.class === 'legend')
  const legendText = textOf(legend)
  for (const label of ['key-1 (steady)', 'key-2 (steady)', 'key-3 (burst)', 'pool total', 'pool limit', 'strict-mode threshold', 'fair share per key', 'strict mode']) {
    assert.ok(legendText.includes(label), `legend has ${label}`)
  }
  const title = elements.find((e) => e.name === 'title')
  assert.match(textOf(title), /^kimi: three API keys share 1,500 requests per hourly window; key-3 bursts$/)
  const axes = elements.find((e) => e.attrs.class === 'axes')
  assert.ok(textOf(axes).includes('requests in the hourly window'), 'y axis title')
  assert.ok(text.includes('time (minutes)'), 'x axis title')
  assert.ok(elements.some((e) => e.attrs.class === 'reference limit'))
  assert.ok(elements.filter((e) => e.attrs.class === 'strict-mode')[0].children.length > 0, 'strict mode is shaded')
  const xmllint = spawnSync('xmllint', ['--noout', file], { encoding: 'utf8' })
  if (!xmllint.error) assert.equal(xmllint.status, 0, xmllint.stderr)
})

test('the XML checker refuses broken documents (it can fail)', () => {
  assert.throws(() => parseXml('<svg><g></svg>'), /closes/)
  assert.throws(() => parseXml('<svg a="1" a="2"/>'), /duplicate/)
  assert.throws(() => parseXml('<svg><text>a & b</text></svg>'), /entity/)
  assert.throws(() => parseXml('<svg x=1/>'), /unquoted/)
  assert.throws(() => parseXml('<a/><b/>'), /one root/)
})

test('the text summary has one row per key, blocked counts by reason and shares of the pool', () => {
  const r = simulate(['--out', path.join(dir, 'text.svg'), '--windows', '2', '--seed', '7'])
  assert.equal(r.code, 0, r.stderr)
  assert.match(r.stdout, /^Simulated 2 h of kimi: requests\/hourly, limit 1,500 \(plan from the catalog\)/)
  const header = r.stdout.split('\n').find((l) => l.startsWith('key '))
  assert.deepEqual(header.split(/ {2,}/), [
    'key',
    'attempted',
    'admitted',
    'blocked: fair-share',
    'global-saturated',
    'cap-absolute',
    'deprioritized',
    'used (requests)',
    'share of pool',
  ])
  for (const label of ['key-1 (steady)', 'key-2 (steady)', 'key-3 (burst)', 'all keys']) {
    assert.ok(r.stdout.split('\n').some((l) => l.startsWith(label)), label)
  }
  assert.match(r.stdout, /^all keys .* 100\.0 %$/m)
  assert.match(r.stdout, /^Chart: text\.svg$/m)
  const svg = parseXml(fs.readFileSync(path.join(dir, 'text.svg'), 'utf8'))
  assert.equal([...walk(svg)].filter((e) => e.attrs.class === 'window-boundary').length, 1)
})

test('codex (percent plan): the upstream fetcher saturates the pool, and the note says why shares are not kept', () => {
  const r = simulate(['--json', '--provider', 'codex', '--out', path.join(dir, 'codex.svg')])
  assert.equal(r.code, 0, r.stderr)
  const summary = JSON.parse(r.stdout)
  assert.deepEqual(summary.chart, { unit: 'percent', window: '5h', limit: 100, windowMs: 18_000_000 })
  for (const key of summary.keys) {
    assert.equal(key.blocked['fair-share'], 0, 'no per-key counters for percent')
    assert.equal(key.blockedTotal, key.blocked['global-saturated'])
  }
  assert.ok(summary.keys[0].blockedTotal > 0, 'the steady keys are stopped at 100 % too')
  assert.ok(Math.abs(summary.poolEnd - 100) < 1e-9)
  assert.match(summary.notes[0], /^Percent plans have no per-key counters/)
})

test('plans with unknown (ε) limits need --limit; with it, the plan is a stored row', () => {
  const r = simulate(['--provider', 'glm', '--out', path.join(dir, 'glm.svg')])
  assert.equal(r.code, 1)
  assert.match(r.stderr, /no limits for glm .* pass --limit <n> for its tokens\/5h dimension/)
  const ok = simulate(['--json', '--provider', 'glm', '--limit', '3000000', '--out', path.join(dir, 'glm.svg')])
  assert.equal(ok.code, 0, ok.stderr)
  const summary = JSON.parse(ok.stdout)
  assert.equal(summary.plan.origin, 'stored row (--limit)')
  assert.deepEqual(summary.chart, { unit: 'tokens', window: '5h', limit: 3_000_000, windowMs: 18_000_000 })
  assert.equal(summary.keys[0].blockedTotal, 0)
  assert.ok(summary.keys[2].blocked['fair-share'] > 0)
  const unknown = simulate(['--provider', 'nope'])
  assert.equal(unknown.code, 1)
  assert.match(unknown.stderr, /no catalog plan for "nope"; known: .*kimi/)
  const badThreshold = simulate(['--threshold', '1.5'])
  assert.equal(badThreshold.code, 1)
  assert.match(badThreshold.stderr, /--threshold must be a number in 0\.\.1/)
})

test('policy soft: the burst key is deprioritized over its share, never blocked for it', () => {
  const r = simulate(['--json', '--policy', 'soft', '--out', path.join(dir, 'soft.svg')])
  assert.equal(r.code, 0, r.stderr)
  const summary = JSON.parse(r.stdout)
  const burst = summary.keys.find((k) => k.role === 'burst')
  assert.equal(burst.blocked['fair-share'], 0)
  assert.ok(burst.deprioritized > 100, `the burst key was deprioritized: ${burst.deprioritized}`)
  for (const steady of summary.keys.filter((k) => k.role === 'steady')) assert.equal(steady.deprioritized, 0, steady.id)
})
