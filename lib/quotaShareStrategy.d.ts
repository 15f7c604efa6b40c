// Types of lib/quotaShareStrategy.js (docs/contract.md §10). The test helpers it re-exports are
// native and declared in binding.d.ts.

/**
 * A target of an auto-minted pool combo, as the host builds it. The selection reads only
 * these fields and returns the very same objects, so any other fields are kept.
 */
export interface QuotaShareTarget {
  /** The DRR key: deficits are kept per execution key within a combo. */
  executionKey: string
  /** The upstream connection; without one a target is never saturated nor capped. */
  connectionId?: string | null
  /** The DRR weight: used when finite and > 0, otherwise 1. */
  weight?: number | null
  /** The target's `provider/model`. Not read: gating uses the `modelStr` argument. */
  modelStr?: string
}

/** Options of `selectQuotaShareTarget`. */
export interface QuotaShareSelectOptions {
  /**
   * Connection id → its concurrency cap. `null`, ≤ 0, non-finite or missing = no cap.
   * A target whose connection has `in-flight >= cap` moves to the at-cap tier, unless no
   * target would have room.
   */
  maxConcurrentByConnection?: Map<string, number | null | undefined> | null
}

/** The outcome of `selectQuotaShareTarget`: the host's own target objects. */
export interface QuotaShareSelection<T = QuotaShareTarget> {
  /** The target to try first; `null` only for no targets. */
  target: T | null
  /**
   * The targets in the order to try them: the winner, the other targets with room (the
   * first of them the P2C runner-up; a target repeating the winner's execution key is left
   * out), the at-cap tier, the saturated tier, each in input order.
   */
  orderedTargets: T[]
  /**
   * Releases the in-flight slot the selection took on the winner's connection, at the
   * selection's clock. Idempotent: only the first call releases. A no-op for no targets or
   * a winner without a connection.
   */
  decrementInflight: () => void
}

/**
 * The `quota-share` strategy: chooses among the upstream connections of a pool combo,
 * synchronously, at `nowMs` (default `Date.now()`).
 *
 * 1. No targets → `{ target: null, orderedTargets: [], decrementInflight: no-op }`.
 * 2. Gating: a target is saturated when its connection's `5h`, `7d` or `7d:<model>`
 *    account bucket is (`model` = `modelStr` after its first `/`, or all of it without a
 *    `/`); when every target is saturated, all are eligible again.
 * 3. Caps (`options.maxConcurrentByConnection`): eligible targets whose connection has
 *    `in-flight >= cap` go to the at-cap tier; when none has room, none moves.
 * 4. Deficit round robin over the targets with room, state per `comboName` (200 combos at
 *    most, the oldest inserted evicted): each target's deficit gains `w / Σw`, the largest
 *    deficit wins (ties: input order) and pays 1. One target: no state changes.
 * 5. Power of two choices: the DRR runner-up wins instead only with strictly fewer
 *    requests in flight.
 * 6. The winner's connection gets an in-flight lease of `DEFAULT_LEASE_MS`, released by
 *    `decrementInflight()`.
 *
 * The algorithm runs natively in one call; only the fields of `QuotaShareTarget` cross.
 *
 * Throws a `TypeError` (`code: "ERR_QUOTA_INVALID_ARG"`, the message starting with the
 * field) when `targets` is not an array, a target is not an object, an `executionKey` is
 * not a string, a `connectionId` is neither a string nor `null`/`undefined`, `comboName`
 * is not a string, `modelStr` is neither a string nor `null`/`undefined`,
 * `options.maxConcurrentByConnection` is not a `Map`, or `nowMs` is not a number; a
 * `RangeError` when `nowMs` is not finite.
 */
export declare function selectQuotaShareTarget<T extends QuotaShareTarget>(
  targets: readonly T[],
  comboName: string,
  modelStr: string | null | undefined,
  nowMs?: number,
  options?: QuotaShareSelectOptions | null,
): QuotaShareSelection<T>
