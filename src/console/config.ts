import { z } from 'zod'

// The browser console's slice of the config: the file's `console` block (GATEWAY_CONSOLE and
// GATEWAY_CONSOLE_SECRET override it).

export interface ConsoleConfig {
  enabled: boolean
  /**
   * Signs session cookies; instances that share it accept each other's sessions. Absent: a key derived
   * from the output signing key (configured, or generated once and kept in the store).
   */
  sessionSecret?: string
  /** How long a console session lasts after sign-in. */
  sessionTtlMs: number
  /** Sign-in attempts per minute from one client address. */
  signInsPerMinute: number
}

/** The config file's `console` block. */
export const consoleSchema = z
  .object({
    enabled: z
      .boolean()
      .optional()
      .describe('Serve the browser console at /console (`GATEWAY_CONSOLE=off` turns it off).'),
    sessionSecret: z
      .string()
      .min(32, 'must be at least 32 characters')
      .optional()
      .describe(
        "Key signing console sessions (`GATEWAY_CONSOLE_SECRET`); instances sharing it accept each other's sessions. Derived from the output signing key when unset.",
      ),
    sessionTtlMs: z
      .number()
      .int()
      .min(60_000)
      .max(7 * 86_400_000)
      .optional()
      .describe('How long a console session lasts after sign-in.'),
    signInsPerMinute: z
      .number()
      .int()
      .min(1)
      .max(10_000)
      .optional()
      .describe('Console sign-in attempts one client address may make per minute.'),
  })
  .strict()
  .default({})
  .describe('The browser console.')

/** `enabled`: GATEWAY_CONSOLE (`on`, `off`, `true`, …); `sessionSecret`: GATEWAY_CONSOLE_SECRET. */
export function resolveConsole(
  c: z.infer<typeof consoleSchema>,
  env: { enabled?: string; sessionSecret?: string },
): ConsoleConfig {
  return {
    enabled: env.enabled === undefined ? (c.enabled ?? true) : ['on', 'true', '1'].includes(env.enabled),
    sessionSecret: env.sessionSecret ?? c.sessionSecret,
    sessionTtlMs: c.sessionTtlMs ?? 60 * 60_000,
    signInsPerMinute: c.signInsPerMinute ?? 10,
  }
}
