// How every bench measures: a warm-up, then up to `maxOps` operations or `maxMs`
// milliseconds, whichever comes first; latency per operation from process.hrtime.bigint
// (for concurrent runs: from the batch's start to the operation's resolution).

const hr = () => process.hrtime.bigint()

/** `{ opsPerSec, p50, p99 }` (µs) of latencies in ns. */
export function summarize(latNs, count, totalNs) {
  const sorted = Float64Array.from(latNs).sort()
  const pct = (p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] / 1e3
  return { opsPerSec: count / (Number(totalNs) / 1e9), p50: pct(50), p99: pct(99) }
}

/** The round whose `by` (a field, `ratio` unless named) is the median (the upper one of an
 *  even count), and the lowest and highest: how repeated runs on a noisy machine are reported. */
export function medianRound(rounds, by = 'ratio') {
  const sorted = [...rounds].sort((a, b) => a[by] - b[by])
  return { median: sorted[Math.floor(sorted.length / 2)], lowest: sorted[0][by], highest: sorted[sorted.length - 1][by] }
}

/** A measurer for the given limits: `serial(fn, finish?)` and `concurrent(fn, finish?)`, `fn(i)` async. */
export function measurer({ maxOps, maxMs, warmup, concurrency }) {
  // `finish` (optional): work `fn` defers (a buffered commit), run once after the warm-up,
  // untimed, and once inside the timed window after its last call, so the window pays for
  // exactly its own calls' deferred work.
  async function serial(fn, finish) {
    for (let i = 0; i < warmup; i++) await fn(i)
    if (finish) await finish()
    const lat = []
    const start = hr()
    const deadline = start + BigInt(maxMs) * 1_000_000n
    let i = 0
    for (; i < maxOps; i++) {
      const t0 = hr()
      await fn(i)
      const t1 = hr()
      lat.push(Number(t1 - t0))
      if (t1 > deadline) { i++; break }
    }
    if (finish) await finish()
    return summarize(lat, i, hr() - start)
  }

  async function concurrent(fn, finish) {
    const batch = async (base, lat) => {
      const t0 = hr()
      await Promise.all(
        Array.from({ length: concurrency }, (_, j) => fn(base + j).then(() => lat && lat.push(Number(hr() - t0)))),
      )
    }
    for (let i = 0; i < warmup; i += concurrency) await batch(i, null)
    if (finish) await finish()
    const lat = []
    const start = hr()
    const deadline = start + BigInt(maxMs) * 1_000_000n
    let i = 0
    while (i < maxOps) {
      await batch(i, lat)
      i += concurrency
      if (hr() > deadline) break
    }
    if (finish) await finish()
    return summarize(lat, i, hr() - start)
  }

  return { serial, concurrent }
}
