'use strict'
// `quota-engine simulate`: runs cli/simulate.js, prints the summary table and writes the
// chart. A progress bar is drawn on stderr only when it is a terminal.
const fs = require('node:fs')
const path = require('node:path')
const { runSimulation } = require('./simulate.js')
const { renderChart } = require('./chart.js')
const { CliError } = require('./database.js')
const { formatNumber, formatPercent, formatDuration, table } = require('./format.js')

function progressBar(stream) {
  if (!stream.isTTY) return { update() {}, done() {} }
  const width = 30
  let last = -1
  return {
    update(fraction) {
      const percent = Math.floor(fraction * 100)
      if (percent === last) return
      last = percent
      const filled = Math.round(fraction * width)
      stream.write(`\r  simulating [${'█'.repeat(filled)}${'░'.repeat(width - filled)}] ${String(percent).padStart(3)} %`)
    },
    done() {
      stream.write('\r\x1b[2K')
    },
  }
}

function renderSummary(result, outFile) {
  const c = result.chart
  const unit = c.unit === 'percent' ? '%' : c.unit
  const lines = [
    `Simulated ${formatDuration(result.durationMs)} of ${result.provider}: ${c.unit}/${c.window}, limit ${formatNumber(c.limit)}` +
      ` (plan from the ${result.plan.origin}). 3 keys of weight ${formatNumber(result.keys[0].weight, 1)},` +
      ` fair share ${formatNumber(result.fairShare, 1)} ${unit} each; policy ${result.policy};` +
      ` strict at ${formatNumber(result.threshold * 100)} % upstream use.`,
    '',
  ]
  const rows = result.keys.map((k) => [
    k.label,
    formatNumber(k.attempted, 0),
    formatNumber(k.admitted, 0),
    formatNumber(k.blocked['fair-share'], 0),
    formatNumber(k.blocked['global-saturated'], 0),
    formatNumber(k.blocked['cap-absolute'], 0),
    formatNumber(k.deprioritized, 0),
    formatNumber(k.used, 1),
    formatPercent(k.share),
  ])
  const sum = (f) => result.keys.reduce((a, k) => a + f(k), 0)
  rows.push([
    'all keys',
    formatNumber(sum((k) => k.attempted), 0),
    formatNumber(sum((k) => k.admitted), 0),
    formatNumber(sum((k) => k.blocked['fair-share']), 0),
    formatNumber(sum((k) => k.blocked['global-saturated']), 0),
    formatNumber(sum((k) => k.blocked['cap-absolute']), 0),
    formatNumber(sum((k) => k.deprioritized), 0),
    formatNumber(sum((k) => k.used), 1),
    formatPercent(1),
  ])
  lines.push(
    ...table(
      [
        { title: 'key' },
        { title: 'attempted', align: 'right' },
        { title: 'admitted', align: 'right' },
        { title: 'blocked: fair-share', align: 'right' },
        { title: 'global-saturated', align: 'right' },
        { title: 'cap-absolute', align: 'right' },
        { title: 'deprioritized', align: 'right' },
        { title: `used (${unit})`, align: 'right' },
        { title: 'share of pool', align: 'right' },
      ],
      rows,
    ),
  )
  lines.push('')
  lines.push(...result.outcome.map((sentence) => `${sentence}.`))
  for (const note of result.notes) lines.push(`Note: ${note}.`)
  if (outFile) lines.push(`Chart: ${outFile}`)
  return lines.join('\n')
}

/** The `simulate` command. */
function simulateCommand(options) {
  const bar = options.json || options.progress === false ? progressBar({}) : progressBar(process.stderr)
  let result
  try {
    result = runSimulation({
      provider: options.provider,
      windows: options.windows,
      threshold: options.threshold,
      policy: options.policy,
      limit: options.limit,
      calls: options.calls,
      seed: options.seed,
      onProgress: bar.update,
    })
  } catch (err) {
    if (err instanceof RangeError) throw new CliError(err.message, 1)
    throw err
  } finally {
    bar.done()
  }
  const outFile = path.resolve(options.out)
  fs.mkdirSync(path.dirname(outFile), { recursive: true })
  fs.writeFileSync(outFile, renderChart(result))
  if (options.json) {
    const { series, ...summary } = result
    process.stdout.write(`${JSON.stringify({ ...summary, chartFile: outFile }, null, 2)}\n`)
  } else {
    process.stdout.write(`${renderSummary(result, path.relative(process.cwd(), outFile) || outFile)}\n`)
  }
  return 0
}

module.exports = { simulateCommand, renderSummary }
