import type {
  ClaimShare,
  OutputStore,
  SecretStore,
  StoredOutput,
  TaskStores,
  TaskStore,
  WebhookDelivery,
  WebhookStore,
} from '../types.ts'
import type { TaskRecord } from '../../domain/tasks.ts'
import { pageBefore } from './state.ts'

// One process's prediction state (the interfaces: types.ts). As in state.ts, each method runs to
// completion without awaiting, so every read-modify-write is atomic; records are copied in and out.

const copyTask = (t: TaskRecord): TaskRecord => structuredClone(t)
const copyDelivery = (d: WebhookDelivery): WebhookDelivery => ({ ...d })
const copyOutput = (o: StoredOutput): StoredOutput => ({ ...o })

const isFinished = (t: TaskRecord): boolean => t.status !== 'processing'

/**
 * Up to `limit` of `due` (oldest first) under `share` (types.ts ClaimShare): accounts in turn,
 * each up to its room; handed back oldest first.
 */
function pickShared<T extends { accountId: string }>(
  due: readonly T[],
  limit: number,
  share: ClaimShare | undefined,
): T[] {
  if (!share) return due.slice(0, limit)
  const rank = new Map<string, number>()
  const ranked: { item: T; rank: number; order: number }[] = []
  due.forEach((item, order) => {
    const r = (rank.get(item.accountId) ?? 0) + 1
    rank.set(item.accountId, r)
    if (r <= share.perAccount - (share.busy.get(item.accountId) ?? 0)) ranked.push({ item, rank: r, order })
  })
  return ranked
    .sort((a, b) => a.rank - b.rank || a.order - b.order)
    .slice(0, limit)
    .sort((a, b) => a.order - b.order)
    .map((r) => r.item)
}

/** Tasks and webhook deliveries: a task's sweep also drops its settled deliveries. */
interface TaskMaps {
  tasks: Map<string, TaskRecord>
  /** accountId + '\0' + idempotency key → task id. */
  byKey: Map<string, string>
  deliveries: Map<string, WebhookDelivery>
}

export function createMemoryTaskStores(): TaskStores {
  const maps: TaskMaps = { tasks: new Map(), byKey: new Map(), deliveries: new Map() }
  return {
    tasks: createMemoryTaskStore(maps),
    outputs: createMemoryOutputStore(),
    webhooks: createMemoryWebhookStore(maps.deliveries),
    secrets: createMemorySecretStore(),
  }
}

function createMemoryTaskStore({ tasks, byKey, deliveries }: TaskMaps): TaskStore {
  return {
    async create(task, idempotencySince) {
      if (tasks.has(task.id)) throw new Error(`task ${task.id} exists`)
      if (task.idempotencyKey !== null) {
        const k = `${task.accountId}\0${task.idempotencyKey}`
        const existing = tasks.get(byKey.get(k) ?? '')
        if (existing && existing.createdAt >= idempotencySince) {
          return { task: copyTask(existing), created: false }
        }
        byKey.set(k, task.id)
      }
      tasks.set(task.id, copyTask(task))
      return { task: copyTask(task), created: true }
    },
    async get(id) {
      const t = tasks.get(id)
      return t ? copyTask(t) : null
    },
    async claimDue(owner, now, leaseMs, limit, share) {
      const all = [...tasks.values()]
        .filter(
          (t) =>
            (t.status === 'processing' || t.cancelUpstream) &&
            t.nextRunAt <= now &&
            (t.leaseOwner === '' || t.leaseUntil <= now),
        )
        .sort((a, b) => a.nextRunAt - b.nextRunAt)
      const due = pickShared(all, limit, share)
      for (const t of due) {
        t.leaseOwner = owner
        t.leaseUntil = now + leaseMs
      }
      return due.map(copyTask)
    },
    async findByIdempotencyKey(accountId, idempotencyKey, since) {
      const t = tasks.get(byKey.get(`${accountId}\0${idempotencyKey}`) ?? '')
      return t && t.createdAt >= since ? copyTask(t) : null
    },
    async advance(id, owner, expectStatus, patch) {
      const t = tasks.get(id)
      if (!t || t.leaseOwner !== owner || t.status !== expectStatus) return null
      Object.assign(t, structuredClone(patch), { leaseOwner: '', leaseUntil: 0 })
      return copyTask(t)
    },
    async markSubmitting(id, owner, now) {
      const t = tasks.get(id)
      if (!t || t.leaseOwner !== owner || t.status !== 'processing' || t.upstreamState !== null) return false
      t.submitStartedAt = now
      return true
    },
    async cancel(accountId, id, now) {
      const t = tasks.get(id)
      if (!t || t.accountId !== accountId) return null
      if (t.status === 'processing') {
        t.status = 'cancelled'
        t.cancelUpstream = t.upstreamState !== null
        t.updatedAt = now
        t.nextRunAt = now
      }
      return copyTask(t)
    },
    async listByAccount(accountId, { limit, before }) {
      const ids = [...tasks.values()].filter((t) => t.accountId === accountId).map((t) => t.id)
      return pageBefore(ids, limit, before, (id) => copyTask(tasks.get(id)!))
    },
    async sweep(before) {
      const removed: string[] = []
      for (const t of [...tasks.values()]) {
        if (isFinished(t) && !t.cancelUpstream && t.updatedAt < before) {
          tasks.delete(t.id)
          if (t.idempotencyKey !== null) {
            const k = `${t.accountId}\0${t.idempotencyKey}`
            if (byKey.get(k) === t.id) byKey.delete(k)
          }
          // Its settled deliveries go too; a pending one stays, so the finish it reports is still sent.
          for (const d of [...deliveries.values()]) {
            if (d.taskId === t.id && d.status !== 'pending') deliveries.delete(d.id)
          }
          removed.push(...t.outputs.map((o) => o.id))
        }
      }
      return removed
    },
  }
}

function createMemoryOutputStore(): OutputStore {
  const outputs = new Map<string, StoredOutput>()
  return {
    async put(output) {
      outputs.set(output.id, copyOutput(output))
    },
    async get(id) {
      const o = outputs.get(id)
      return o ? copyOutput(o) : null
    },
    async takeExpired(now, limit) {
      const expired = [...outputs.values()].filter((o) => o.expiresAt <= now).slice(0, limit)
      for (const o of expired) outputs.delete(o.id)
      return expired.map(copyOutput)
    },
    async existingKeys(storageKeys) {
      const wanted = new Set(storageKeys)
      const found = new Set<string>()
      for (const o of outputs.values()) if (wanted.has(o.storageKey)) found.add(o.storageKey)
      return found
    },
  }
}

function createMemoryWebhookStore(deliveries: Map<string, WebhookDelivery>): WebhookStore {
  return {
    async enqueue(delivery) {
      if (!deliveries.has(delivery.id)) deliveries.set(delivery.id, copyDelivery(delivery))
    },
    async claimDue(owner, now, leaseMs, limit, share) {
      const all = [...deliveries.values()]
        .filter(
          (d) =>
            d.status === 'pending' && d.nextAttemptAt <= now && (d.leaseOwner === '' || d.leaseUntil <= now),
        )
        .sort((a, b) => a.nextAttemptAt - b.nextAttemptAt)
      const due = pickShared(all, limit, share)
      for (const d of due) {
        d.leaseOwner = owner
        d.leaseUntil = now + leaseMs
      }
      return due.map(copyDelivery)
    },
    async record(id, owner, result) {
      const d = deliveries.get(id)
      if (!d || d.leaseOwner !== owner) return false
      Object.assign(d, result, { leaseOwner: '', leaseUntil: 0 })
      return true
    },
    async get(id) {
      const d = deliveries.get(id)
      return d ? copyDelivery(d) : null
    },
    async listByTask(taskId) {
      return [...deliveries.values()]
        .filter((d) => d.taskId === taskId)
        .sort((a, b) => a.createdAt - b.createdAt)
        .map(copyDelivery)
    },
    async listByAccount(accountId, limit) {
      return [...deliveries.values()]
        .filter((d) => d.accountId === accountId)
        .slice(-limit)
        .reverse()
        .map(copyDelivery)
    },
  }
}

function createMemorySecretStore(): SecretStore {
  const secrets = new Map<string, string>()
  return {
    async getOrCreate(name, create) {
      let v = secrets.get(name)
      if (v === undefined) {
        v = create()
        secrets.set(name, v)
      }
      return v
    },
    async get(name) {
      return secrets.get(name) ?? null
    },
    async set(name, value) {
      secrets.set(name, value)
    },
  }
}
