'use strict'
// The simulation's chart as a hand-written SVG: each key's admitted use over time and the
// pool's, against the pool limit, the strict-mode threshold and the fair share, with the
// periods of strict mode shaded and a strip of blocked attempts per key underneath.
const { formatNumber, formatDuration } = require('./format.js')

const WIDTH = 1000
const PLOT = { left: 84, right: 730, top: 96, bottom: 440 }
const STRIP = { top: PLOT.bottom + 86, row: 16, gap: 5 }
const LEGEND_X = 756
const FONT = "font-family=\"'DejaVu Sans', 'Helvetica Neue', Helvetica, Arial, sans-serif\""
const KEY_COLORS = ['#2563eb', '#059669', '#ea580c', '#7c3aed', '#db2777']
const COLORS = {
  pool: '#111827',
  limit: '#b91c1c',
  threshold: '#b45309',
  fair: '#6b7280',
  strict: '#fef3c7',
  grid: '#e5e7eb',
  axis: '#374151',
  muted: '#6b7280',
}

function escapeXml(text) {
  return String(text).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')
}

/** Ticks at 1, 2 or 5 × 10^k covering `[0, max]`, about `count` of them. */
function niceTicks(max, count = 6) {
  if (!(max > 0)) return { step: 1, ticks: [0, 1] }
  const raw = max / count
  const magnitude = 10 ** Math.floor(Math.log10(raw))
  const step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((s) => s >= raw)
  const ticks = []
  for (let v = 0; v <= max + step * 1e-9; v += step) ticks.push(+v.toPrecision(12))
  if (ticks[ticks.length - 1] < max) ticks.push(+(ticks[ticks.length - 1] + step).toPrecision(12))
  return { step, ticks }
}

/** The x axis unit for a run of `durationMs`. */
function timeUnit(durationMs) {
  if (durationMs <= 3 * 3_600_000) return { ms: 60_000, name: 'minutes' }
  if (durationMs <= 3 * 86_400_000) return { ms: 3_600_000, name: 'hours' }
  return { ms: 86_400_000, name: 'days' }
}

/** `1500` → `1.5k`; `4100000000` → `4.1G` (axis labels only). */
function compact(value) {
  const abs = Math.abs(value)
  for (const [limit, suffix] of [
    [1e9, 'G'],
    [1e6, 'M'],
    [1e3, 'k'],
  ]) {
    if (abs >= limit * 10 || (abs >= limit && value % limit !== 0)) return `${+(value / limit).toFixed(2)}${suffix}`
    if (abs >= limit) return `${value / limit}${suffix}`
  }
  return `${+value.toFixed(2)}`
}

function unitLabel(result) {
  const { unit, window } = result.chart
  const name = unit === 'percent' ? '% of the upstream quota' : unit === 'usd' ? 'USD' : unit
  return `${name} in the ${window} window`
}

/** The SVG document (a string) for a `runSimulation` result. */
function renderChart(result) {
  const { series, chart } = result
  const percent = chart.unit === 'percent'
  const keyColor = (i) => KEY_COLORS[i % KEY_COLORS.length]
  const tUnit = timeUnit(result.durationMs)
  const xMax = result.durationMs / tUnit.ms
  const xTicks = niceTicks(xMax, 8)
  xTicks.ticks = xTicks.ticks.filter((v) => v <= xMax + 1e-9)
  const x = (ms) => PLOT.left + (ms / result.durationMs) * (PLOT.right - PLOT.left)
  const dataMax = Math.max(chart.limit, ...series.pool, ...series.keys.flat())
  const yTicks = niceTicks(dataMax * 1.05, 7)
  const yTop = yTicks.ticks[yTicks.ticks.length - 1]
  const y = (v) => PLOT.bottom - (v / yTop) * (PLOT.bottom - PLOT.top)
  const out = []
  const push = (s) => out.push(s)

  const stripBottom = STRIP.top + result.keys.length * (STRIP.row + STRIP.gap)
  push(`<?xml version="1.0" encoding="UTF-8"?>`)
  push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="@HEIGHT@" viewBox="0 0 ${WIDTH} @HEIGHT@" ${FONT} font-size="13">`,
  )
  const title = `${result.provider}: three API keys share ${formatNumber(chart.limit)} ${chart.unit === 'percent' ? '%' : chart.unit} per ${chart.window} window; key-3 bursts`
  push(`<title>${escapeXml(title)}</title>`)
  push(`<rect x="0" y="0" width="${WIDTH}" height="@HEIGHT@" fill="#ffffff"/>`)
  push(`<text x="${PLOT.left}" y="36" font-size="20" font-weight="bold" fill="${COLORS.pool}">${escapeXml(title)}</text>`)
  const subtitle =
    `Simulated ${formatDuration(result.durationMs)} on the real engine · plan from the ${result.plan.origin} · ` +
    `policy ${result.policy} · strict when the upstream is ≥ ${formatNumber(result.threshold * 100)} % used`
  push(`<text x="${PLOT.left}" y="60" fill="${COLORS.muted}">${escapeXml(subtitle)}</text>`)

  // Strict-mode periods.
  push(`<g class="strict-mode">`)
  const sampleMs = series.t.length > 1 ? series.t[1] - series.t[0] : result.durationMs
  let runStart = null
  let firstBand = true
  for (let i = 0; i <= series.strict.length; i++) {
    const on = i < series.strict.length && series.strict[i]
    if (on && runStart === null) runStart = Math.max(series.t[i] - sampleMs / 2, 0)
    if (!on && runStart !== null) {
      const end = Math.min(series.t[i - 1] + sampleMs / 2, result.durationMs)
      push(
        `<rect x="${x(runStart).toFixed(1)}" y="${PLOT.top}" width="${(x(end) - x(runStart)).toFixed(1)}" height="${PLOT.bottom - PLOT.top}" fill="${COLORS.strict}"/>`,
      )
      if (firstBand && x(end) - x(runStart) > 90) {
        push(`<text x="${(x(runStart) + 6).toFixed(1)}" y="${PLOT.top + 16}" fill="${COLORS.threshold}" font-size="12">strict mode</text>`)
      }
      firstBand = false
      runStart = null
    }
  }
  push(`</g>`)

  // Grid and axes.
  push(`<g class="grid" stroke="${COLORS.grid}" stroke-width="1">`)
  for (const v of yTicks.ticks) push(`<line x1="${PLOT.left}" x2="${PLOT.right}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}"/>`)
  for (const v of xTicks.ticks) {
    const px = x(v * tUnit.ms).toFixed(1)
    push(`<line x1="${px}" x2="${px}" y1="${PLOT.top}" y2="${PLOT.bottom}"/>`)
  }
  push(`</g>`)
  push(`<g class="axes" fill="${COLORS.axis}" font-size="12">`)
  push(`<line x1="${PLOT.left}" x2="${PLOT.left}" y1="${PLOT.top}" y2="${PLOT.bottom}" stroke="${COLORS.axis}"/>`)
  push(`<line x1="${PLOT.left}" x2="${PLOT.right}" y1="${PLOT.bottom}" y2="${PLOT.bottom}" stroke="${COLORS.axis}"/>`)
  for (const v of yTicks.ticks) {
    push(`<text x="${PLOT.left - 8}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${escapeXml(compact(v))}</text>`)
  }
  for (const v of xTicks.ticks) {
    push(`<text x="${x(v * tUnit.ms).toFixed(1)}" y="${PLOT.bottom + 18}" text-anchor="middle">${escapeXml(formatNumber(v))}</text>`)
  }
  push(
    `<text x="${(PLOT.left + PLOT.right) / 2}" y="${PLOT.bottom + 40}" text-anchor="middle" font-size="13">time (${tUnit.name})</text>`,
  )
  const yMid = (PLOT.top + PLOT.bottom) / 2
  push(
    `<text x="24" y="${yMid}" text-anchor="middle" transform="rotate(-90 24 ${yMid})" font-size="13">${escapeXml(unitLabel(result))}</text>`,
  )
  push(`</g>`)

  // Reference lines, labelled at the right end.
  const reference = (value, color, dash, label, cls) => {
    const py = y(value).toFixed(1)
    push(
      `<g class="reference ${cls}"><line x1="${PLOT.left}" x2="${PLOT.right}" y1="${py}" y2="${py}" stroke="${color}" stroke-width="1.5" stroke-dasharray="${dash}"/>` +
        `<text x="${PLOT.right - 4}" y="${(y(value) - 5).toFixed(1)}" text-anchor="end" fill="${color}" font-size="12">${escapeXml(label)}</text></g>`,
    )
  }
  const unitSuffix = percent ? ' %' : ''
  reference(chart.limit, COLORS.limit, '8 4', `pool limit ${formatNumber(chart.limit)}${unitSuffix}`, 'limit')
  const strictLabel = percent
    ? `strict from ${formatNumber(result.strictAt)} %`
    : `strict from ${formatNumber(result.strictAt)} (${formatNumber(result.threshold * 100)} % of the limit)`
  reference(result.strictAt, COLORS.threshold, '2 4', strictLabel, 'threshold')
  reference(result.fairShare, COLORS.fair, '10 3 2 3', `fair share per key ${formatNumber(result.fairShare, 1)}${unitSuffix}`, 'fair-share')

  // Window boundaries: the sliding window's buckets turn over here (docs/contract.md §2).
  for (let w = 1; w < result.windows; w++) {
    const wx = x(w * chart.windowMs).toFixed(1)
    push(
      `<g class="window-boundary"><line x1="${wx}" x2="${wx}" y1="${PLOT.top}" y2="${PLOT.bottom}" stroke="${COLORS.axis}" stroke-width="1" stroke-dasharray="1 3"/>` +
        `<text x="${(x(w * chart.windowMs) + 4).toFixed(1)}" y="${PLOT.bottom - 8}" fill="${COLORS.muted}" font-size="11">window ${w + 1}</text></g>`,
    )
  }

  // Where the burst starts.
  if (result.burstAtMs > 0 && result.burstAtMs < result.durationMs) {
    const bx = x(result.burstAtMs).toFixed(1)
    push(
      `<g class="burst-marker"><line x1="${bx}" x2="${bx}" y1="${PLOT.top}" y2="${PLOT.bottom}" stroke="${keyColor(2)}" stroke-width="1" stroke-dasharray="3 3"/>` +
        `<text x="${(x(result.burstAtMs) + 5).toFixed(1)}" y="${PLOT.top + 36}" fill="${keyColor(2)}" font-size="12">key-3 bursts from here</text></g>`,
    )
  }

  // The series: the pool first (underneath), then the keys.
  const pathOf = (values) =>
    values.map((v, i) => `${i === 0 ? 'M' : 'L'}${x(series.t[i]).toFixed(1)} ${y(v).toFixed(1)}`).join(' ')
  push(`<g class="series-group" fill="none" stroke-linejoin="round" stroke-linecap="round">`)
  push(`<path class="series" data-series="pool" d="${pathOf(series.pool)}" stroke="${COLORS.pool}" stroke-width="3"/>`)
  result.keys.forEach((key, i) => {
    push(`<path class="series" data-series="${escapeXml(key.id)}" d="${pathOf(series.keys[i])}" stroke="${keyColor(i)}" stroke-width="2.25"/>`)
  })
  push(`</g>`)

  // Blocked attempts per key and sample interval: the darker, the larger the blocked share.
  push(`<g class="blocked-strip" font-size="12">`)
  push(`<text x="${PLOT.left}" y="${STRIP.top - 10}" fill="${COLORS.axis}">blocked attempts (share of each key’s attempts in the interval)</text>`)
  result.keys.forEach((key, i) => {
    const top = STRIP.top + i * (STRIP.row + STRIP.gap)
    push(`<rect x="${PLOT.left}" y="${top}" width="${PLOT.right - PLOT.left}" height="${STRIP.row}" fill="#f3f4f6"/>`)
    push(`<text x="${PLOT.left - 8}" y="${top + 12}" text-anchor="end" fill="${keyColor(i)}">${escapeXml(key.id)}</text>`)
    for (let s = 1; s < series.t.length; s++) {
      const attempted = series.attempted[i][s]
      const blocked = series.blocked[i][s]
      if (!blocked) continue
      const x0 = x(series.t[s - 1])
      const x1 = x(series.t[s])
      push(
        `<rect x="${x0.toFixed(1)}" y="${top}" width="${Math.max(x1 - x0, 0.5).toFixed(1)}" height="${STRIP.row}" fill="${keyColor(i)}" fill-opacity="${(0.15 + 0.85 * (blocked / attempted)).toFixed(2)}"/>`,
      )
    }
  })
  push(`</g>`)

  // Legend.
  push(`<g class="legend" font-size="13">`)
  let ly = PLOT.top + 4
  const legendLine = (color, width, dash, label, detail) => {
    push(
      `<g class="legend-item"><line x1="${LEGEND_X}" x2="${LEGEND_X + 28}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="${width}"${dash ? ` stroke-dasharray="${dash}"` : ''}/>` +
        `<text x="${LEGEND_X + 36}" y="${ly + 4}" fill="${COLORS.pool}">${escapeXml(label)}</text>` +
        (detail ? `<text x="${LEGEND_X + 36}" y="${ly + 21}" fill="${COLORS.muted}" font-size="12">${escapeXml(detail)}</text>` : '') +
        `</g>`,
    )
    ly += detail ? 42 : 26
  }
  result.keys.forEach((key, i) => {
    legendLine(keyColor(i), 2.5, null, key.label, `${formatNumber(key.admitted, 0)} of ${formatNumber(key.attempted, 0)} calls admitted`)
  })
  legendLine(COLORS.pool, 3, null, 'pool total', `ends at ${formatNumber(result.poolEnd, 1)}${unitSuffix}`)
  ly += 6
  legendLine(COLORS.limit, 1.5, '8 4', 'pool limit')
  legendLine(COLORS.threshold, 1.5, '2 4', 'strict-mode threshold')
  legendLine(COLORS.fair, 1.5, '10 3 2 3', 'fair share per key')
  push(
    `<g class="legend-item"><rect x="${LEGEND_X}" y="${ly - 8}" width="28" height="16" fill="${COLORS.strict}" stroke="${COLORS.threshold}" stroke-width="0.5"/>` +
      `<text x="${LEGEND_X + 36}" y="${ly + 4}" fill="${COLORS.pool}">strict mode</text></g>`,
  )
  ly += 40
  const notes = [...result.outcome, ...result.notes]
  for (const note of notes) {
    for (const line of wrap(note.endsWith('.') ? note : `${note}.`, 30)) {
      push(`<text x="${LEGEND_X}" y="${ly}" fill="${COLORS.axis}" font-size="12">${escapeXml(line)}</text>`)
      ly += 16
    }
    ly += 8
  }
  push(`</g>`)
  push(`</svg>`)
  const height = Math.round(Math.max(stripBottom + 18, ly + 4))
  return `${out.join('\n').replace(/@HEIGHT@/g, String(height))}\n`
}

/** Greedy word wrap to `width` characters. */
function wrap(text, width) {
  const lines = []
  let line = ''
  for (const word of text.split(/\s+/)) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line)
      line = word
    } else line = line ? `${line} ${word}` : word
  }
  if (line) lines.push(line)
  return lines
}

module.exports = { renderChart, niceTicks, escapeXml }
