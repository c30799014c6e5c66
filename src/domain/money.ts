// Money is kept as integer picodollars (1e-12 USD) in a bigint; its arithmetic is billing/money.ts.

/**
 * Integer picodollars. Stores keep it exactly: 1e9 USD is 1e21, beyond 64-bit integers, so a NUMERIC
 * column in SQL or a decimal string elsewhere (see store/types.ts, whose backends do).
 */
export type Money = bigint
