import { randomBytes } from 'node:crypto'

// decisions.md identifiers: crypto random, never sequential.

export interface Ids {
  generation(): string
  request(): string
}

export const ids: Ids = {
  /** `gen-` + 24 url-safe characters (144 random bits). */
  generation: () => `gen-${randomBytes(18).toString('base64url')}`,
  /** 32 lowercase hex. */
  request: () => randomBytes(16).toString('hex'),
}
