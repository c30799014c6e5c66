import type { SecretStore } from '../store/types.ts'
import { generateWebhookSecret } from './webhook-signing.ts'

// Each account's webhook signing secret (`whsec_…`): set in the config file or through the admin API,
// generated at first use otherwise, and kept in the store so every instance signs with the same one.

const nameOf = (accountId: string) => `webhook-secret:${accountId}`

export interface WebhookSecrets {
  /** The account's secret, generated (once, atomically) when it has none. */
  secretFor(accountId: string): Promise<string>
  /** Sets the account's secret (the config file's, or an admin's). */
  set(accountId: string, secret: string): Promise<void>
  /** Replaces the account's secret with a new random one and returns it. */
  rotate(accountId: string): Promise<string>
}

export function createWebhookSecrets(secrets: SecretStore): WebhookSecrets {
  return {
    secretFor: (accountId) => secrets.getOrCreate(nameOf(accountId), generateWebhookSecret),
    set: (accountId, secret) => secrets.set(nameOf(accountId), secret),
    async rotate(accountId) {
      const secret = generateWebhookSecret()
      await secrets.set(nameOf(accountId), secret)
      return secret
    },
  }
}
