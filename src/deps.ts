import type { Logger as PinoLogger } from 'pino'
import type { Config } from './config.ts'
import { ids as defaultIds, type Ids } from './ids.ts'
import { createLogger } from './logger.ts'
import { createProviderRegistry, type ProviderRegistry } from './providers/registry.ts'
import { createRouter, type Router } from './routing/router.ts'
import { createMemoryStore } from './store/memory.ts'
import type { Store } from './store/types.ts'

export interface Lifecycle {
  /** Set on SIGTERM: new requests get 503 and /readyz fails while in-flight work finishes. */
  draining: boolean
}

export interface Deps {
  config: Config
  log: PinoLogger
  store: Store
  providers: ProviderRegistry
  router: Router
  now: () => number
  ids: Ids
  lifecycle: Lifecycle
  close(): Promise<void>
}

export interface DepsOverrides {
  log?: PinoLogger
  store?: Store
  now?: () => number
  ids?: Ids
}

export async function createDeps(config: Config, overrides: DepsOverrides = {}): Promise<Deps> {
  const now = overrides.now ?? Date.now
  const log = overrides.log ?? createLogger(config.server.logLevel)
  const store = overrides.store ?? createMemoryStore()
  for (const account of config.accounts) {
    await store.accounts.upsert({ id: account.id, name: account.name, createdAt: now() })
    for (const key of account.keys) await store.accounts.addKey(account.id, key.sha256)
  }
  const providers = createProviderRegistry(config, { now })
  const router = createRouter(config, providers)
  return {
    config,
    log,
    store,
    providers,
    router,
    now,
    ids: overrides.ids ?? defaultIds,
    lifecycle: { draining: false },
    async close() {
      await providers.close()
      await store.close()
    },
  }
}
