import type { Money } from '../domain/money.ts'

// Money is kept as integer picodollars (1e-12 USD) in a bigint. One token of the cheapest model
// ($0.005 per million tokens) is 5 000 picodollars, so every per-token price is a whole number and
// sums are exact. Conversion to a USD number happens only at the edge (JSON answers).

const PICO_PER_USD = 1_000_000_000_000n
const DECIMALS = 12

/**
 * Parses a USD amount given as a number or decimal string without going through float arithmetic
 * ("0.075" → 75 000 000 000). More than 12 decimals is refused.
 */
export function usd(amount: number | string): Money {
  const text = typeof amount === 'number' ? numberToPlain(amount) : amount.trim()
  const m = /^(-)?(\d+)(?:\.(\d+))?$/.exec(text)
  if (!m) throw new RangeError(`not a decimal amount: ${text}`)
  const [, sign, whole = '0', frac = ''] = m
  if (frac.length > DECIMALS) throw new RangeError(`more than ${DECIMALS} decimals: ${text}`)
  const value = BigInt(whole) * PICO_PER_USD + BigInt(frac.padEnd(DECIMALS, '0'))
  return sign ? -value : value
}

/**
 * A USD amount (a JSON number) to the nearest picodollar, half away from zero: for amounts a client
 * computed in floating point (0.1 + 0.2 = 0.30000000000000004), where `usd` would refuse the 17 decimals.
 */
export function usdRounded(amount: number): Money {
  const text = numberToPlain(amount)
  const m = /^(-?\d+)\.(\d+)$/.exec(text)
  const frac = m?.[2]
  if (!m?.[1] || frac === undefined || frac.length <= DECIMALS) return usd(text)
  const truncated = usd(`${m[1]}.${frac.slice(0, DECIMALS)}`)
  if (Number(frac[DECIMALS]) < 5) return truncated
  return truncated + (text.startsWith('-') ? -1n : 1n)
}

/** Number → plain decimal text, also for values JavaScript prints in exponent form (1e-7). */
function numberToPlain(n: number): string {
  if (!Number.isFinite(n)) throw new RangeError(`not a finite amount: ${n}`)
  const s = String(n)
  if (!/e/i.test(s)) return s
  // From 1e21 toFixed prints exponents too; a float that large is a whole number, exact as a BigInt.
  if (Math.abs(n) >= 1e21) return BigInt(n).toString()
  return n.toFixed(20).replace(/\.?0+$/, '')
}

const EXACT_IN_A_DOUBLE = BigInt(Number.MAX_SAFE_INTEGER)

/** Picodollars → USD number, for JSON answers only. */
export function toUsd(m: Money): number {
  // Up to 2^53 picodollars (about 9 007 USD) the amount and 10^12 are both exact doubles, and a
  // division rounds their exact quotient correctly: the same double as the decimal text below parses
  // to, without a BigInt division and a string per call (this runs for every request's log line).
  if (m <= EXACT_IN_A_DOUBLE && m >= -EXACT_IN_A_DOUBLE) return Number(m) / 1e12
  const negative = m < 0n
  const abs = negative ? -m : m
  const whole = abs / PICO_PER_USD
  const frac = (abs % PICO_PER_USD).toString().padStart(DECIMALS, '0')
  const n = Number(`${whole}.${frac}`)
  return negative ? -n : n
}

/** A price per million units (tokens, characters) → picodollars per single unit; must be exact. */
export function perUnit(usdPerMillion: number): Money {
  const micro = usd(usdPerMillion)
  if (micro % 1_000_000n !== 0n) {
    throw new RangeError(`price ${usdPerMillion} per million has more than 6 decimals`)
  }
  return micro / 1_000_000n
}

/** A decimal rate (0.75 = 75 %) as parts per million; at most 6 decimals. */
export function toPpm(rate: number): number {
  if (!(rate >= 0 && rate <= 1)) throw new RangeError(`rate ${rate} is not between 0 and 1`)
  const ppm = usd(rate) / 1_000_000n
  if (ppm * 1_000_000n !== usd(rate)) throw new RangeError(`rate ${rate} has more than 6 decimals`)
  return Number(ppm)
}

export function fromPpm(ppm: number): number {
  return ppm / 1_000_000
}

/** `amount × ppm / 1e6`, rounded half up to the picodollar. */
export function applyPpm(amount: Money, ppm: number): Money {
  return (amount * BigInt(ppm) + 500_000n) / 1_000_000n
}
