// Types of lib/quotaShareConcurrency.js (docs/contract.md §10, the backlog queue).

/** Options of `acquireQuotaShareConcurrencySlot`. */
export interface QuotaShareQueueOptions {
  /** How long a caller may wait in the queue, in ms; `null`/absent: 30 000 (the host's semaphore's default). */
  queueTimeoutMs?: number | null
  /** How many callers may wait per connection; `null`/absent: no limit. 0: none waits. */
  maxQueueSize?: number | null
}

/** The host's combo logger: `warn(tag, message)`. */
export interface QuotaShareLogger {
  warn: (...args: any[]) => unknown
}

/** `"qsconn:<connectionId>"`: the key of a connection's backlog queue. */
export declare function quotaShareConcurrencyKey(connectionId: string): string

/**
 * Waits, first in first out, for one of `cap` concurrency slots on the target's
 * connection, and resolves to the function that gives the slot back (idempotent: only
 * the first call releases; the slot goes straight to the next waiter).
 *
 * Resolves to `null` without waiting when the target has no connection or `cap` is
 * `null`/`undefined`, ≤ 0 or `NaN`. Fails open: when the queue already holds
 * `maxQueueSize` waiters, or a waiter has waited `queueTimeoutMs`, it calls
 * `log.warn("COMBO", message)` once, as the host's module did (the message names the
 * connection, the cap and why; without a logger, one JSON line on stderr with
 * `component: "quota:scheduler"`, `connectionId`, `cap`, …) and resolves to
 * `null` — never a rejection. A waiter that timed out never holds a slot. Timers are
 * unref'd: a waiting caller does not keep the process alive.
 *
 * Rejects with a `TypeError`/`RangeError` (`code: "ERR_QUOTA_INVALID_ARG"`) only for
 * arguments of the wrong type: a non-number `cap`, `options` that is not an object, or a
 * `queueTimeoutMs`/`maxQueueSize` that is not a number ≥ 0.
 */
export declare function acquireQuotaShareConcurrencySlot(
  target: { connectionId?: string | null } | null | undefined,
  cap: number | null | undefined,
  options?: QuotaShareQueueOptions | null,
  log?: QuotaShareLogger | null,
): Promise<(() => void) | null>
