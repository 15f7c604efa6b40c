#!/usr/bin/env node
'use strict'
// The `quota-engine` command: operators' view of the engine on the host's storage.sqlite
// (status, plans, gc, doctor) and a simulation of three keys sharing a plan (simulate).
// Argument parsing is commander's; each command lives in cli/<name>.js.
const { Command, InvalidArgumentError, Option } = require('commander')
const { version } = require('../package.json')

function number(name, { min = -Infinity, max = Infinity, integer = false } = {}) {
  return (raw) => {
    const value = Number(raw)
    if (raw.trim() === '' || !Number.isFinite(value) || value < min || value > max || (integer && !Number.isInteger(value))) {
      const range = max === Infinity ? `≥ ${min}` : `in ${min}..${max}`
      throw new InvalidArgumentError(`${name} must be ${integer ? 'an integer' : 'a number'} ${range}`)
    }
    return value
  }
}

const program = new Command()
program
  .name('quota-engine')
  .description("Inspect and exercise OmniRoute's quota-sharing engine on the host's storage.sqlite.")
  .version(version)
  .option('--db <path>', 'the database (default: $DATA_DIR/storage.sqlite, else the host default data directory)')
  .showHelpAfterError('(run with --help for usage)')
  .addHelpText(
    'after',
    `
The database must exist: the CLI never creates one (exit code 2 when it is missing or
unreadable). status, plans and gc open it as the engine does, which creates any missing
engine table (as the host's first request would); doctor only reads it (doctor --repair
opens it too, to repair counters left out of range by older versions).

Examples:
  quota-engine status --db ~/.omniroute/storage.sqlite
  DATA_DIR=/srv/omniroute quota-engine plans --json
  quota-engine doctor
  quota-engine simulate --provider kimi --out kimi.svg`,
  )

/** Runs a command's action, turning a CliError into a message and an exit code. */
function run(action) {
  return async (...args) => {
    const command = args[args.length - 1]
    const globals = command.optsWithGlobals()
    try {
      process.exitCode = await action(...args.slice(0, -1), globals.db)
    } catch (err) {
      if (typeof err.exitCode === 'number') {
        process.stderr.write(`quota-engine: ${err.message}\n`)
        process.exitCode = err.exitCode
      } else {
        process.stderr.write(`quota-engine: ${err && err.stack ? err.stack : err}\n`)
        process.exitCode = 1
      }
    } finally {
      require('../cli/database.js').closeEngine()
    }
  }
}

program
  .command('status')
  .description("each pool's dimensions and every key's use, fair share, deficit and borrowing")
  .option('--pool <id>', 'only this pool')
  .option('--json', 'machine-readable output')
  .action(run((options, db) => require('../cli/status.js').statusCommand(options, db)))

program
  .command('plans')
  .description('the plan resolved for each connection, and whether it came from a stored row, the catalog or nowhere')
  .argument('[connectionIds...]', 'only these connections (default: every connection the database knows)')
  .option('--provider <name>', 'the provider of connections the database has no provider for')
  .option('--json', 'machine-readable output')
  .action(run((ids, options, db) => require('../cli/plans.js').plansCommand(ids, options, db)))

program
  .command('gc')
  .description('delete counter rows older than the retention period now (the background sweep does it hourly)')
  .option('--days <n>', 'retention in days (default: QUOTA_CONSUMPTION_RETENTION_DAYS, 14)', number('--days', { min: 0 }))
  .option('--json', 'machine-readable output')
  .action(run((options, db) => require('../cli/gc.js').gcCommand(options, db)))

program
  .command('doctor')
  .description('database path and schema, the store driver and why, Redis reachability, the effective configuration')
  .option('--timeout <ms>', 'Redis connect timeout', number('--timeout', { min: 1, integer: true }), 1000)
  .option('--repair', 'repair counters outside 0..1e15 (Infinity, negative: left by older versions); the only write doctor makes')
  .option('--json', 'machine-readable output')
  .addHelpText('after', '\nExit code: 0 no problems, 1 problems found, 2 database missing or unreadable.')
  .action(run((options, db) => require('../cli/doctor.js').doctorCommand(options, db)))

program
  .command('simulate')
  .description('three keys share a catalog plan on a simulated clock while one bursts; prints a summary and writes an SVG chart')
  .option('--provider <name>', 'a provider of the plan catalog', 'kimi')
  .option('--windows <n>', 'how many windows of the charted dimension to simulate', number('--windows', { min: 1, max: 50, integer: true }), 1)
  .option('--threshold <0..1>', 'saturation threshold (default: QUOTA_SATURATION_THRESHOLD, 0.5)', number('--threshold', { min: 0, max: 1 }))
  .addOption(new Option('--policy <policy>', 'the keys’ policy').choices(['hard', 'soft', 'burst']).default('hard'))
  .option('--limit <n>', 'set the limit of the charted dimension (needed for plans whose catalog limits are unknown)', number('--limit', { min: Number.MIN_VALUE }))
  .option('--calls <n>', 'calls that fill the charted window (for percent plans: the upstream capacity)', number('--calls', { min: 10, max: 100000, integer: true }), 1500)
  .option('--seed <n>', 'random seed of the arrival times', number('--seed', { min: 0, integer: true }), 1)
  .option('--out <file.svg>', 'where to write the chart', './quota-simulation.svg')
  .option('--no-progress', 'no progress bar (it is drawn only on a terminal anyway)')
  .option('--json', 'print the summary as JSON')
  .addHelpText(
    'after',
    `
Runs the real engine (enforceStep/recordStep with an injected clock) on a temporary
SQLite file, removed afterwards; --db is not used. A saturation fetcher plays the
upstream: for requests/tokens/usd plans it reports the pool's own use ÷ limit; for
percent plans (codex, claude, bailian) an upstream with --calls calls of capacity.`,
  )
  .action(run((options) => require('../cli/simulate-command.js').simulateCommand(options)))

require('../cli/copy-binary.js').register(program)

program.parseAsync(process.argv)
