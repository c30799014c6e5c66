import { z } from 'zod'

/** Node's timers take at most 2^31 − 1 ms; a longer delay would fire at once. */
export const timeoutMs = z
  .number()
  .int()
  .positive()
  .max(2 ** 31 - 1)
