import { randomFillSync } from 'node:crypto'

// docs/design/decisions.md identifiers: crypto random, never sequential.

export interface Ids {
  generation(): string
  request(): string
}

/**
 * Random bytes drawn from a pooled buffer refilled by the CSPRNG: one system call per 256
 * ids instead of one per id (the ids are on every request's path).
 */
function createRandomPool(size = 4096): (n: number, encoding: 'hex' | 'base64url') => string {
  const pool = Buffer.alloc(size)
  let offset = size
  return (n, encoding) => {
    if (offset + n > size) {
      randomFillSync(pool)
      offset = 0
    }
    const out = pool.toString(encoding, offset, offset + n)
    offset += n // bytes handed out are never handed out again
    return out
  }
}

const random = createRandomPool()

export const ids: Ids = {
  /** `gen-` + 24 url-safe characters (144 random bits). */
  generation: () => `gen-${random(18, 'base64url')}`,
  /** 32 lowercase hex. */
  request: () => random(16, 'hex'),
}
