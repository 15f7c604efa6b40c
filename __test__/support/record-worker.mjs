// Child process: argv DATA_DIR, count, apiKeyId, connectionId, provider, ending.
// Awaits `count` recordConsumption calls ({ requests: 1, tokens: 10 } each), prints
// "DONE <count>", then ends by `ending`: "natural" (the event loop drains), "exit"
// (process.exit(0) at once), "throw" (an uncaught exception) or "hold" (waits forever).
// The records are buffered by the engine; every ending but a kill must commit them.
process.env.DATA_DIR = process.argv[2]
const count = Number(process.argv[3])
const [apiKeyId, connectionId, provider, ending] = process.argv.slice(4)
const { createRequire } = await import('node:module')
const { recordConsumption } = createRequire(import.meta.url)('@omniroute/quota-engine')
for (let i = 0; i < count; i++) {
  await recordConsumption({ apiKeyId, connectionId, provider, cost: { requests: 1, tokens: 10 } })
}
process.stdout.write(`DONE ${count}\n`)
if (ending === 'exit') process.exit(0)
if (ending === 'throw') throw new Error('the child fails after recording (expected by the test)')
if (ending === 'hold') setInterval(() => {}, 1 << 30)
