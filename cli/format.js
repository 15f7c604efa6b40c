'use strict'
// Plain-text output for the CLI: aligned tables and number formatting. No colour, so the
// output reads the same in a terminal, a log file or a pipe.

const EPSILON = Number.EPSILON

/** `1234.5` → `1,234.5`; at most `digits` decimals, trailing zeros dropped. */
function formatNumber(value, digits = 2) {
  if (value === null || value === undefined) return '—'
  if (!Number.isFinite(value)) return String(value)
  if (value !== 0 && value <= EPSILON && value > 0) return 'ε'
  return value.toLocaleString('en-US', { maximumFractionDigits: digits })
}

/** `0.4112` → `41.1 %`. */
function formatPercent(fraction, digits = 1) {
  if (!Number.isFinite(fraction)) return '—'
  return `${(fraction * 100).toFixed(digits)} %`
}

/** A limit as the catalog means it: ε is "unknown, configure manually". */
function formatLimit(limit) {
  return limit <= EPSILON ? 'ε (unknown)' : formatNumber(limit)
}

/** `{ unit, window, limit }` → `requests/hourly 1,500`. */
function formatDimension(dim) {
  return `${dim.unit}/${dim.window} ${formatLimit(dim.limit)}`
}

/**
 * An aligned table. `columns`: `[{ title, align: 'left' | 'right' }]`; `rows`: arrays of
 * strings. Returns the lines, without a trailing newline.
 */
function table(columns, rows, { indent = '' } = {}) {
  const widths = columns.map((c, i) => Math.max(c.title.length, ...rows.map((r) => String(r[i]).length)))
  const cell = (text, i) => {
    const s = String(text)
    return columns[i].align === 'right' ? s.padStart(widths[i]) : s.padEnd(widths[i])
  }
  const line = (cells) => `${indent}${cells.map(cell).join('  ')}`.trimEnd()
  return [line(columns.map((c) => c.title)), line(widths.map((w) => '─'.repeat(w))), ...rows.map(line)]
}

/** A duration in ms as the largest sensible unit: `90 s`, `15 min`, `5 h`, `7 d`. */
function formatDuration(ms) {
  if (ms < 60_000) return `${Math.round(ms / 1000)} s`
  if (ms < 3_600_000) return `${+(ms / 60_000).toFixed(1)} min`
  if (ms < 172_800_000) return `${+(ms / 3_600_000).toFixed(1)} h`
  return `${+(ms / 86_400_000).toFixed(1)} d`
}

module.exports = { EPSILON, formatNumber, formatPercent, formatLimit, formatDimension, table, formatDuration }
