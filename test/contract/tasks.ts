import { randomBytes } from 'node:crypto'
import { describe, expect, it, onTestFinished, vi } from 'vitest'
import type { StoredOutput, WebhookDelivery, Store } from '../../src/store/types.ts'
import type { TaskRecord } from '../../src/domain/tasks.ts'
import { toGatewayError } from '../../src/errors.ts'

// The contract of the prediction stores (src/store/types.ts): tasks, hosted outputs, webhook
// deliveries and secrets. Every backend runs it (memory, sqlite and postgres *.contract.test.ts).
//
// Unlike the rest of the store contract, claims and sweeps look at every row, so each test needs a
// store holding no prediction state: `makeStore` gives one. SQL backends also give `another`, which
// opens a second store on the same database (two gateway instances, or a restart).

export interface TaskContractStore {
  store: Store
  /** A new store on the same database or file as `store` (SQL backends: required with `shared`). */
  another?: () => Promise<Store>
}

const T0 = 1_700_000_000_000

const taskId = (): string => randomBytes(16).toString('hex')

export function taskFixture(over: Partial<TaskRecord> = {}): TaskRecord {
  return {
    id: taskId(),
    accountId: 'acct-a',
    model: 'mock/image-1',
    family: 'image',
    provider: 'mock',
    deployment: 'mock-images',
    upstreamModel: 'image-1-upstream',
    input: {
      prompt: 'a cat on a mat ☃ "quoted" \\ back\u0000slash',
      n: 2,
      size: '1024x1024',
      seed: null,
      guidance: 7.5,
      flags: [true, false, null, 0, -1.25, 'x', { deep: [[], {}] }],
    },
    webhook: 'https://hooks.example.test/junction?x=1',
    origin: 'https://gateway.example.test',
    status: 'processing',
    upstreamState: null,
    cancelUpstream: false,
    outputs: [],
    error: null,
    createdAt: T0,
    updatedAt: T0,
    deadlineAt: T0 + 600_000,
    nextRunAt: T0,
    runs: 0,
    leaseOwner: '',
    leaseUntil: 0,
    idempotencyKey: null,
    requestHash: null,
    submitStartedAt: null,
    ...over,
  }
}

function outputFixture(over: Partial<StoredOutput> = {}): StoredOutput {
  return {
    id: `out_${randomBytes(12).toString('base64url')}`,
    taskId: taskId(),
    accountId: 'acct-a',
    type: 'image',
    contentType: 'image/png',
    bytes: 123_456,
    storageKey: `outputs/${randomBytes(8).toString('hex')}.png`,
    createdAt: T0,
    expiresAt: T0 + 3_600_000,
    ...over,
  }
}

function deliveryFixture(
  taskIdOf: string,
  event: string,
  over: Partial<WebhookDelivery> = {},
): WebhookDelivery {
  return {
    id: `msg_${taskIdOf}_${event}`,
    taskId: taskIdOf,
    accountId: 'acct-a',
    url: 'https://hooks.example.test/junction',
    body: JSON.stringify({ id: taskIdOf, event, status: 'success', output: ['https://x.test/o'] }),
    status: 'pending',
    attempts: 0,
    nextAttemptAt: T0,
    lastError: null,
    leaseOwner: '',
    leaseUntil: 0,
    createdAt: T0,
    ...over,
  }
}

const ids = (records: readonly { id: string }[]): string[] => records.map((r) => r.id)

export function describeTaskStoreContract(
  name: string,
  makeStore: () => Promise<TaskContractStore>,
  /** The backend keeps its state in a database that other stores can open (its `another`). */
  { shared = false }: { shared?: boolean } = {},
): void {
  /** Closes a store once, at the end of the test or earlier (a restart). */
  const closer = (store: Store) => {
    let closed: Promise<void> | undefined
    const close = () => (closed ??= store.close())
    onTestFinished(close)
    return close
  }
  const open = async () => {
    const made = await makeStore()
    const close = closer(made.store)
    const another = made.another
    return {
      store: made.store,
      close,
      another: another
        ? async () => {
            const s = await another()
            closer(s)
            return s
          }
        : undefined,
    }
  }
  const openStore = async (): Promise<Store> => (await open()).store

  describe(`Task store contract: ${name}`, () => {
    describe('tasks', () => {
      it('listByAccount pages the account’s tasks, newest first', async () => {
        const { tasks } = await openStore()
        const account = `acct-${taskId()}`
        const made = [1, 2, 3, 4, 5].map((n) =>
          taskFixture({ id: taskId(), accountId: account, createdAt: T0 + n }),
        )
        for (const t of made) await tasks.create(t, 0)
        await tasks.create(taskFixture({ id: taskId(), accountId: `acct-${taskId()}` }), 0)
        const p1 = await tasks.listByAccount(account, { limit: 2 })
        expect(ids(p1.data)).toEqual(ids([made[4]!, made[3]!]))
        expect(p1.data[0]).toEqual(made[4])
        const p2 = await tasks.listByAccount(account, { limit: 2, before: p1.nextCursor! })
        expect(ids(p2.data)).toEqual(ids([made[2]!, made[1]!]))
        const p3 = await tasks.listByAccount(account, { limit: 2, before: p2.nextCursor! })
        expect(p3).toEqual({ data: [made[0]], nextCursor: null })
        expect(await tasks.listByAccount(account, { limit: 2, before: taskId() })).toEqual({
          data: [],
          nextCursor: null,
        })
      })

      it('create and get round-trip every field', async () => {
        const { tasks } = await openStore()
        const full = taskFixture({
          status: 'success',
          upstreamState: { job: 'j-1', poll: { url: 'https://up.test/j-1', attempts: [1, 2, 3] }, ok: true },
          cancelUpstream: true,
          outputs: [
            { id: 'out_a', type: 'image' },
            { id: 'out_b', type: 'video' },
            { id: 'out_c', type: 'audio' },
          ],
          error: { code: 'upstream_error', message: 'the provider said "no" ☃' },
          createdAt: T0 + 1,
          updatedAt: T0 + 2,
          deadlineAt: T0 + 3,
          nextRunAt: T0 + 4,
          runs: 7,
          leaseOwner: 'instance-1',
          leaseUntil: T0 + 5,
          idempotencyKey: 'idem-key-1',
          requestHash: 'a'.repeat(64),
        })
        const bare = taskFixture({ family: 'speech', webhook: null, input: { text: 'hi' } })
        expect(await tasks.create(full, 0)).toEqual({ task: full, created: true })
        expect(await tasks.create(bare, 0)).toEqual({ task: bare, created: true })
        expect(await tasks.get(full.id)).toEqual(full)
        expect(await tasks.get(bare.id)).toEqual(bare)
        expect(await tasks.get(taskId())).toBeNull()
      })

      it('changing what a read returned or what was written changes nothing stored', async () => {
        const { tasks } = await openStore()
        const input = taskFixture({ upstreamState: { job: 'j' }, outputs: [{ id: 'out_1', type: 'image' }] })
        const original = structuredClone(input)
        const { task } = await tasks.create(input, 0)
        ;(input.input as { prompt: string }).prompt = 'changed'
        input.outputs.push({ id: 'out_2', type: 'image' })
        task.outputs[0]!.id = 'out_mutated'
        ;(task.upstreamState as { job: string }).job = 'mutated'
        const got = (await tasks.get(original.id))!
        expect(got).toEqual(original)
        got.status = 'failed'
        expect(await tasks.get(original.id)).toEqual(original)
      })

      it('a second task with the same id is refused', async () => {
        const { tasks } = await openStore()
        const t = taskFixture()
        await tasks.create(t, 0)
        // Refused alone: a create running alongside it is not affected, and the key is not taken.
        const alongside = taskFixture()
        const [dup, ok] = await Promise.allSettled([
          tasks.create({ ...t, model: 'other', idempotencyKey: 'dup-key' }, 0),
          tasks.create(alongside, 0),
        ])
        expect(dup.status).toBe('rejected')
        // A constraint broken is a bug, answered 500 by every backend alike, never 503 `store_unavailable`
        // (that is for a database that cannot answer: sql-errors.ts's rule).
        const refusal = toGatewayError((dup as PromiseRejectedResult).reason)
        expect({ status: refusal.status, code: refusal.code }).toEqual({
          status: 500,
          code: 'internal_error',
        })
        expect(ok).toEqual({ status: 'fulfilled', value: { task: alongside, created: true } })
        expect(await tasks.get(t.id)).toEqual(t)
        expect(await tasks.get(alongside.id)).toEqual(alongside)
        const keyed = taskFixture({ idempotencyKey: 'dup-key' })
        expect(await tasks.create(keyed, 0)).toEqual({ task: keyed, created: true })
      })

      it('idempotent create: the same key within the window returns the first task', async () => {
        const { tasks } = await openStore()
        const first = taskFixture({ idempotencyKey: 'k1', requestHash: 'h1', createdAt: T0 })
        expect(await tasks.create(first, T0 - 1000)).toEqual({ task: first, created: true })

        // Created exactly at the window's start still counts as inside it.
        const retry = taskFixture({ idempotencyKey: 'k1', requestHash: 'h2', createdAt: T0 + 1000 })
        expect(await tasks.create(retry, T0)).toEqual({ task: first, created: false })
        expect(await tasks.get(retry.id)).toBeNull()

        // Another account's key is its own.
        const other = taskFixture({ accountId: 'acct-b', idempotencyKey: 'k1', createdAt: T0 + 1000 })
        expect(await tasks.create(other, T0)).toEqual({ task: other, created: true })

        // Past the window the key names a new task; the old one stays as it was.
        const later = taskFixture({ idempotencyKey: 'k1', requestHash: 'h3', createdAt: T0 + 5000 })
        expect(await tasks.create(later, T0 + 1)).toEqual({ task: later, created: true })
        expect(await tasks.get(first.id)).toEqual(first)
        const again = taskFixture({ idempotencyKey: 'k1', createdAt: T0 + 6000 })
        expect(await tasks.create(again, T0 + 5000)).toEqual({ task: later, created: false })
        expect(await tasks.get(again.id)).toBeNull()

        // Without a key every create stores a task.
        const a = taskFixture()
        const b = taskFixture()
        expect((await tasks.create(a, T0)).created).toBe(true)
        expect((await tasks.create(b, T0)).created).toBe(true)
        expect(await tasks.get(a.id)).toEqual(a)
        expect(await tasks.get(b.id)).toEqual(b)
      })

      it('racing creates with one key make one task', async () => {
        const { tasks } = await openStore()
        const racers = [1, 2, 3, 4].map((n) => taskFixture({ idempotencyKey: 'race', createdAt: T0 + n }))
        const results = await Promise.all(racers.map((t) => tasks.create(t, 0)))
        expect(results.filter((r) => r.created)).toHaveLength(1)
        const winner = results.find((r) => r.created)!.task
        for (const r of results) expect(r.task).toEqual(winner)
        const stored = await Promise.all(racers.map((t) => tasks.get(t.id)))
        expect(stored.filter((t) => t !== null)).toEqual([winner])
      })

      it('claimDue leases processing and cancelUpstream tasks that are due and free, oldest first', async () => {
        const { tasks } = await openStore()
        const now = T0 + 100
        const p1 = taskFixture({ nextRunAt: T0 + 10 })
        const p2 = taskFixture({ nextRunAt: T0 + 5 })
        const cancelling = taskFixture({
          status: 'cancelled',
          cancelUpstream: true,
          upstreamState: { job: 'c' },
          nextRunAt: T0 + 20,
        })
        const expired = taskFixture({ nextRunAt: T0 + 30, leaseOwner: 'dead', leaseUntil: now })
        const dueNow = taskFixture({ nextRunAt: now })
        const finished = taskFixture({ status: 'success', nextRunAt: T0 })
        const cancelled = taskFixture({ status: 'cancelled', nextRunAt: T0 })
        const failed = taskFixture({ status: 'failed', nextRunAt: T0 })
        const future = taskFixture({ nextRunAt: now + 1 })
        const held = taskFixture({ nextRunAt: T0, leaseOwner: 'other', leaseUntil: now + 1 })
        for (const t of [p1, p2, cancelling, expired, dueNow, finished, cancelled, failed, future, held]) {
          await tasks.create(t, 0)
        }

        const leased = (t: TaskRecord, owner: string, until: number) => ({
          ...t,
          leaseOwner: owner,
          leaseUntil: until,
        })
        const claimed = await tasks.claimDue('w1', now, 1000, 10)
        expect(claimed).toEqual([p2, p1, cancelling, expired, dueNow].map((t) => leased(t, 'w1', now + 1000)))
        for (const t of [p2, p1, cancelling, expired, dueNow]) {
          expect(await tasks.get(t.id)).toEqual(leased(t, 'w1', now + 1000))
        }
        for (const t of [finished, cancelled, failed, future, held]) expect(await tasks.get(t.id)).toEqual(t)

        // While the leases hold, another owner gets only what became due or free meanwhile.
        expect(await tasks.claimDue('w2', now, 1000, 10)).toEqual([])
        expect(await tasks.claimDue('w2', now + 1, 1000, 10)).toEqual([
          leased(held, 'w2', now + 1001),
          leased(future, 'w2', now + 1001),
        ])
        expect(await tasks.claimDue('w3', now + 999, 1000, 10)).toEqual([])
      })

      it('claimDue honours the limit, and an expired lease goes to the next claimant', async () => {
        const { tasks } = await openStore()
        const [a, b, c] = [0, 1, 2].map((n) => taskFixture({ nextRunAt: T0 + n }))
        for (const t of [c!, a!, b!]) await tasks.create(t, 0)

        expect(ids(await tasks.claimDue('one', T0 + 10, 100, 2))).toEqual([a!.id, b!.id])
        expect(ids(await tasks.claimDue('two', T0 + 10, 100, 2))).toEqual([c!.id])
        expect(await tasks.claimDue('two', T0 + 109, 100, 5)).toEqual([])
        // At the lease's end (leaseUntil <= now) every task is free again.
        const retaken = await tasks.claimDue('two', T0 + 110, 100, 5)
        expect(ids(retaken)).toEqual([a!.id, b!.id, c!.id])
        for (const t of retaken) expect([t.leaseOwner, t.leaseUntil]).toEqual(['two', T0 + 210])
        expect((await tasks.get(a!.id))!.leaseOwner).toBe('two')
      })

      it('claimDue with a share serves accounts in turn, each up to its room, oldest first', async () => {
        const { tasks } = await openStore()
        // Account a's backlog is older than everything of b and c.
        const a = [0, 1, 2, 3, 4, 5].map((n) => taskFixture({ accountId: 'acct-a', nextRunAt: T0 + n }))
        const b = [0, 1, 2].map((n) => taskFixture({ accountId: 'acct-b', nextRunAt: T0 + 10 + n }))
        const c = taskFixture({ accountId: 'acct-c', nextRunAt: T0 + 20 })
        for (const t of [...b, c, ...a]) await tasks.create(t, 0)
        const now = T0 + 100

        // With one: every account's first before any account's second; a already works on one here.
        const share = { perAccount: 2, busy: new Map([['acct-a', 1]]) }
        const first = await tasks.claimDue('w1', now, 1000, 3, share)
        expect(ids(first)).toEqual([a[0]!.id, b[0]!.id, c.id])
        // The caller now works on those too: a has no room left, b gets its second, c has no more.
        const after = new Map([
          ['acct-a', 2],
          ['acct-b', 1],
          ['acct-c', 1],
        ])
        const second = await tasks.claimDue('w1', now, 1000, 10, { perAccount: 2, busy: after })
        expect(ids(second)).toEqual([b[1]!.id])
        const busy = new Map([
          ['acct-a', 2],
          ['acct-b', 2],
          ['acct-c', 1],
        ])
        expect(await tasks.claimDue('w1', now, 1000, 10, { perAccount: 2, busy })).toEqual([])
        // Another instance with its own workers takes the rest, oldest first.
        const rest = await tasks.claimDue('w2', now, 1000, 10, { perAccount: 5, busy: new Map() })
        expect(ids(rest)).toEqual([...a.slice(1, 6).map((t) => t.id), b[2]!.id])
      })

      it('findByIdempotencyKey finds the task of the account with the key inside the window', async () => {
        const { tasks } = await openStore()
        const t = taskFixture({ idempotencyKey: 'k-find', requestHash: 'h', createdAt: T0 + 50 })
        await tasks.create(t, 0)
        expect(await tasks.findByIdempotencyKey('acct-a', 'k-find', T0 + 50)).toEqual(t)
        expect(await tasks.findByIdempotencyKey('acct-a', 'k-find', T0 + 51)).toBeNull()
        expect(await tasks.findByIdempotencyKey('acct-b', 'k-find', 0)).toBeNull()
        expect(await tasks.findByIdempotencyKey('acct-a', 'k-other', 0)).toBeNull()
      })

      it('advance applies the patch and frees the lease, only for the holder and the expected status', async () => {
        const { tasks } = await openStore()
        const t = taskFixture()
        await tasks.create(t, 0)
        const [held] = await tasks.claimDue('w1', T0, 1000, 1)
        expect(held).toEqual({ ...t, leaseOwner: 'w1', leaseUntil: T0 + 1000 })

        const patch = {
          status: 'success' as const,
          upstreamState: { job: 'j-9', poll: { n: 3, done: true } },
          outputs: [
            { id: 'out_x', type: 'image' as const },
            { id: 'out_y', type: 'image' as const },
          ],
          nextRunAt: T0 + 50,
          runs: 3,
          updatedAt: T0 + 40,
        }
        expect(await tasks.advance(t.id, 'w2', 'processing', patch)).toBeNull()
        expect(await tasks.advance(t.id, 'w1', 'cancelled', patch)).toBeNull()
        expect(await tasks.advance(taskId(), 'w1', 'processing', patch)).toBeNull()
        expect(await tasks.get(t.id)).toEqual(held)

        const after = { ...t, ...patch, leaseOwner: '', leaseUntil: 0 }
        expect(await tasks.advance(t.id, 'w1', 'processing', patch)).toEqual(after)
        expect(await tasks.get(t.id)).toEqual(after)
        // The lease is gone: the same owner cannot advance again.
        expect(await tasks.advance(t.id, 'w1', 'success', { runs: 9 })).toBeNull()
        expect(await tasks.get(t.id)).toEqual(after)
      })

      it('advance with a partial patch keeps the other fields, and can clear the upstream state', async () => {
        const { tasks } = await openStore()
        const t = taskFixture({ upstreamState: { job: 'keep' }, runs: 1, nextRunAt: T0 })
        await tasks.create(t, 0)
        await tasks.claimDue('w', T0, 1000, 1)
        const step = { ...t, runs: 2, nextRunAt: T0 + 500, leaseOwner: '', leaseUntil: 0 }
        expect(await tasks.advance(t.id, 'w', 'processing', { runs: 2, nextRunAt: T0 + 500 })).toEqual(step)

        await tasks.claimDue('w', T0 + 500, 1000, 1)
        const failed = {
          ...step,
          status: 'failed' as const,
          upstreamState: null,
          error: { code: 'timeout', message: 'the task took too long' },
          updatedAt: T0 + 600,
        }
        expect(
          await tasks.advance(t.id, 'w', 'processing', {
            status: 'failed',
            upstreamState: null,
            error: failed.error,
            updatedAt: T0 + 600,
          }),
        ).toEqual(failed)
        expect(await tasks.get(t.id)).toEqual(failed)
      })

      it('advance moves a task to another deployment (a submit the first one turned away)', async () => {
        const { tasks } = await openStore()
        const t = taskFixture()
        await tasks.create(t, 0)
        await tasks.claimDue('w', T0, 1000, 1)
        const moved = { provider: 'beta', deployment: 'beta#2', upstreamModel: 'beta-model' }
        const patch = { ...moved, upstreamState: { job: 'on-beta' }, runs: 1 }
        const after = { ...t, ...patch, leaseOwner: '', leaseUntil: 0 }
        expect(after.deployment).not.toBe(t.deployment)
        expect(await tasks.advance(t.id, 'w', 'processing', patch)).toEqual(after)
        expect(await tasks.get(t.id)).toEqual(after)
      })

      it('advance keeps the upstream calls made so far, in order; a partial patch keeps them', async () => {
        const { tasks } = await openStore()
        const t = taskFixture()
        await tasks.create(t, 0)
        expect(await tasks.get(t.id)).not.toHaveProperty('attempts')
        const call = (deployment: string, status: number | null, outcome: string, startedAt: number) => ({
          provider: deployment,
          deployment,
          model: t.model,
          status,
          outcome,
          startedAt,
          durationMs: 12,
        })
        const attempts = [call('alpha', 429, 'rate_limit_exceeded', T0 + 1), call('beta', 200, 'ok', T0 + 20)]
        await tasks.claimDue('w', T0, 1000, 1)
        const patch = { upstreamState: { job: 'on-beta' }, runs: 1, attempts }
        expect(await tasks.advance(t.id, 'w', 'processing', patch)).toMatchObject({ attempts })
        await tasks.claimDue('w', T0 + 2000, 1000, 1)
        await tasks.advance(t.id, 'w', 'processing', { runs: 2 })
        expect((await tasks.get(t.id))?.attempts).toEqual(attempts)
      })

      it('markSubmitting records the start of a submit for the lease holder, keeping the lease', async () => {
        const { tasks } = await openStore()
        const t = taskFixture()
        const started = taskFixture({ upstreamState: { job: 'already' } })
        for (const x of [t, started]) await tasks.create(x, 0)
        await tasks.claimDue('w1', T0, 1000, 5)
        expect(await tasks.markSubmitting(t.id, 'w2', T0 + 1)).toBe(false)
        expect(await tasks.markSubmitting(started.id, 'w1', T0 + 1)).toBe(false)
        expect(await tasks.markSubmitting(taskId(), 'w1', T0 + 1)).toBe(false)
        expect(await tasks.markSubmitting(t.id, 'w1', T0 + 7)).toBe(true)
        const marked = { ...t, submitStartedAt: T0 + 7, leaseOwner: 'w1', leaseUntil: T0 + 1000 }
        expect(await tasks.get(t.id)).toEqual(marked)
        // A retry that certainly left nothing upstream clears it.
        expect(await tasks.advance(t.id, 'w1', 'processing', { submitStartedAt: null, runs: 1 })).toEqual({
          ...marked,
          submitStartedAt: null,
          runs: 1,
          leaseOwner: '',
          leaseUntil: 0,
        })
      })

      it('a cancel between claim and advance wins', async () => {
        const { tasks } = await openStore()
        const t = taskFixture({ upstreamState: { job: 'j' } })
        await tasks.create(t, 0)
        await tasks.claimDue('w', T0, 1000, 1)
        const cancelled = await tasks.cancel('acct-a', t.id, T0 + 10)
        expect(await tasks.advance(t.id, 'w', 'processing', { status: 'success' })).toBeNull()
        expect(await tasks.get(t.id)).toEqual(cancelled)
        expect(cancelled!.status).toBe('cancelled')
      })

      it('cancel: only the owning account, processing tasks only', async () => {
        const { tasks } = await openStore()
        const accepted = taskFixture({ upstreamState: { job: 'up-1' }, nextRunAt: T0 + 5000 })
        const queued = taskFixture({ nextRunAt: T0 + 5000 })
        const done = taskFixture({ status: 'success', outputs: [{ id: 'out_d', type: 'image' }] })
        for (const t of [accepted, queued, done]) await tasks.create(t, 0)

        expect(await tasks.cancel('acct-b', accepted.id, T0 + 100)).toBeNull()
        expect(await tasks.cancel('acct-a', taskId(), T0 + 100)).toBeNull()
        expect(await tasks.get(accepted.id)).toEqual(accepted)

        const cancelledUp = {
          ...accepted,
          status: 'cancelled' as const,
          cancelUpstream: true,
          updatedAt: T0 + 100,
          nextRunAt: T0 + 100,
        }
        expect(await tasks.cancel('acct-a', accepted.id, T0 + 100)).toEqual(cancelledUp)
        expect(await tasks.get(accepted.id)).toEqual(cancelledUp)

        const cancelledLocal = {
          ...queued,
          status: 'cancelled' as const,
          cancelUpstream: false,
          updatedAt: T0 + 200,
          nextRunAt: T0 + 200,
        }
        expect(await tasks.cancel('acct-a', queued.id, T0 + 200)).toEqual(cancelledLocal)

        // Finished: returned as it is.
        expect(await tasks.cancel('acct-a', done.id, T0 + 300)).toEqual(done)
        expect(await tasks.cancel('acct-a', accepted.id, T0 + 300)).toEqual(cancelledUp)
        expect(await tasks.get(done.id)).toEqual(done)

        // The runner picks up only the one with an upstream job to cancel.
        expect(ids(await tasks.claimDue('runner', T0 + 300, 1000, 10))).toEqual([accepted.id])
      })

      it('sweep deletes finished tasks older than `before` with their settled deliveries', async () => {
        const { tasks, webhooks } = await openStore()
        const before = T0 + 1000
        const oldSuccess = taskFixture({
          status: 'success',
          updatedAt: T0,
          outputs: [
            { id: 'out_a', type: 'image' },
            { id: 'out_b', type: 'image' },
          ],
          idempotencyKey: 'swept-key',
        })
        const oldFailed = taskFixture({
          status: 'failed',
          updatedAt: T0 + 1,
          error: { code: 'x', message: 'y' },
          outputs: [{ id: 'out_c', type: 'video' }],
        })
        const oldCancelled = taskFixture({ status: 'cancelled', updatedAt: T0 })
        const stillCancelling = taskFixture({
          status: 'cancelled',
          cancelUpstream: true,
          upstreamState: { job: 'j' },
          updatedAt: T0,
        })
        const oldProcessing = taskFixture({ updatedAt: T0 })
        const atBefore = taskFixture({ status: 'success', updatedAt: before })
        const recent = taskFixture({ status: 'success', updatedAt: before + 1 })
        const all = [oldSuccess, oldFailed, oldCancelled, stillCancelling, oldProcessing, atBefore, recent]
        for (const t of all) await tasks.create(t, 0)

        const delivered = deliveryFixture(oldSuccess.id, 'a', {
          status: 'delivered',
          attempts: 1,
          createdAt: T0,
        })
        const gaveUp = deliveryFixture(oldSuccess.id, 'b', {
          status: 'failed',
          attempts: 8,
          createdAt: T0 + 1,
        })
        const pending = deliveryFixture(oldSuccess.id, 'c', { createdAt: T0 + 2 })
        const keptDelivered = deliveryFixture(recent.id, 'a', { status: 'delivered', attempts: 1 })
        for (const d of [delivered, gaveUp, pending, keptDelivered]) await webhooks.enqueue(d)

        expect((await tasks.sweep(before)).sort()).toEqual(['out_a', 'out_b', 'out_c'])
        for (const t of [oldSuccess, oldFailed, oldCancelled]) expect(await tasks.get(t.id)).toBeNull()
        for (const t of [stillCancelling, oldProcessing, atBefore, recent])
          expect(await tasks.get(t.id)).toEqual(t)
        expect(await webhooks.listByTask(oldSuccess.id)).toEqual([pending])
        expect(await webhooks.get(delivered.id)).toBeNull()
        expect(await webhooks.get(gaveUp.id)).toBeNull()
        expect(await webhooks.listByTask(recent.id)).toEqual([keptDelivered])
        expect(await tasks.sweep(before)).toEqual([])

        // The swept task's idempotency key is free again, whatever the window.
        const reuse = taskFixture({ idempotencyKey: 'swept-key', createdAt: T0 + 2000 })
        expect(await tasks.create(reuse, 0)).toEqual({ task: reuse, created: true })
      })
    })

    describe('outputs', () => {
      it('put, replace and get', async () => {
        const { outputs } = await openStore()
        const o = outputFixture({ type: 'audio', contentType: 'audio/mpeg', bytes: 5_000_000_000 })
        await outputs.put(o)
        expect(await outputs.get(o.id)).toEqual(o)
        expect(await outputs.get('out_missing')).toBeNull()
        const replaced = { ...o, bytes: 7, storageKey: 'outputs/replaced', expiresAt: T0 + 99 }
        await outputs.put(replaced)
        expect(await outputs.get(o.id)).toEqual(replaced)
        const got = (await outputs.get(o.id))!
        got.bytes = 0
        expect(await outputs.get(o.id)).toEqual(replaced)
      })

      it('takeExpired removes and returns expired records up to the limit', async () => {
        const { outputs } = await openStore()
        const [o1, o2, o3, o4] = [10, 20, 30, 1000].map((d) => outputFixture({ expiresAt: T0 + d }))
        for (const o of [o1!, o2!, o3!, o4!]) await outputs.put(o)

        expect(await outputs.takeExpired(T0 + 30, 2)).toEqual([o1, o2])
        expect(await outputs.get(o1!.id)).toBeNull()
        expect(await outputs.get(o2!.id)).toBeNull()
        // expiresAt == now is expired.
        expect(await outputs.takeExpired(T0 + 30, 10)).toEqual([o3])
        expect(await outputs.takeExpired(T0 + 30, 10)).toEqual([])
        expect(await outputs.get(o4!.id)).toEqual(o4)
      })

      it('existingKeys reports which storage keys a record points at', async () => {
        const { outputs } = await openStore()
        const a = outputFixture()
        const b = outputFixture({ storageKey: a.storageKey })
        const c = outputFixture({ expiresAt: T0 })
        for (const o of [a, b, c]) await outputs.put(o)
        await outputs.takeExpired(T0, 10)
        expect(await outputs.existingKeys([a.storageKey, 'outputs/none', c.storageKey])).toEqual(
          new Set([a.storageKey]),
        )
        expect(await outputs.existingKeys([])).toEqual(new Set())
      })
    })

    describe('webhook deliveries', () => {
      it('enqueue is idempotent by id; get and listByTask (oldest first)', async () => {
        const { webhooks } = await openStore()
        const task = taskId()
        const second = deliveryFixture(task, 'second', { createdAt: T0 + 2 })
        const first = deliveryFixture(task, 'first', { createdAt: T0 + 1, lastError: 'earlier' })
        await webhooks.enqueue(second)
        await webhooks.enqueue(first)
        await webhooks.enqueue({ ...first, body: '{"changed":true}', attempts: 5 })
        await webhooks.enqueue(deliveryFixture(taskId(), 'other'))
        expect(await webhooks.get(first.id)).toEqual(first)
        expect(await webhooks.get('msg_missing')).toBeNull()
        expect(await webhooks.listByTask(task)).toEqual([first, second])
        expect(await webhooks.listByTask(taskId())).toEqual([])
      })

      it('listByAccount: the account’s last deliveries, newest first', async () => {
        const { webhooks } = await openStore()
        const account = `acct-${taskId()}`
        const made = [1, 2, 3].map((n) =>
          deliveryFixture(taskId(), `e${n}`, { accountId: account, createdAt: T0 + n }),
        )
        for (const d of made) await webhooks.enqueue(d)
        await webhooks.enqueue(deliveryFixture(taskId(), 'foreign', { accountId: `acct-${taskId()}` }))
        expect(await webhooks.listByAccount(account, 2)).toEqual([made[2], made[1]])
        expect(ids(await webhooks.listByAccount(account, 10))).toEqual(ids([made[2]!, made[1]!, made[0]!]))
        expect(await webhooks.listByAccount(`acct-${taskId()}`, 10)).toEqual([])
      })

      it('claimDue leases pending due deliveries; record only by the lease holder', async () => {
        const { webhooks } = await openStore()
        const task = taskId()
        const now = T0 + 100
        const d1 = deliveryFixture(task, 'd1', { nextAttemptAt: T0 + 10, createdAt: T0 + 1 })
        const d2 = deliveryFixture(task, 'd2', { nextAttemptAt: T0 + 5, createdAt: T0 + 2 })
        const d3 = deliveryFixture(task, 'd3', { status: 'delivered', nextAttemptAt: T0, createdAt: T0 + 3 })
        const d4 = deliveryFixture(task, 'd4', { nextAttemptAt: now + 1, createdAt: T0 + 4 })
        const d5 = deliveryFixture(taskId(), 'd5', {
          nextAttemptAt: now,
          leaseOwner: 'dead',
          leaseUntil: now,
        })
        const d6 = deliveryFixture(taskId(), 'd6', { status: 'failed', nextAttemptAt: T0 })
        for (const d of [d1, d2, d3, d4, d5, d6]) await webhooks.enqueue(d)

        const leased = (d: WebhookDelivery, owner: string, until: number) => ({
          ...d,
          leaseOwner: owner,
          leaseUntil: until,
        })
        expect(await webhooks.claimDue('w1', now, 1000, 2)).toEqual([
          leased(d2, 'w1', now + 1000),
          leased(d1, 'w1', now + 1000),
        ])
        expect(await webhooks.claimDue('w1', now, 1000, 10)).toEqual([leased(d5, 'w1', now + 1000)])
        expect(await webhooks.claimDue('w2', now, 1000, 10)).toEqual([])

        const retry = {
          status: 'pending' as const,
          attempts: 1,
          nextAttemptAt: now + 200,
          lastError: 'HTTP 500',
        }
        expect(await webhooks.record(d1.id, 'w2', retry)).toBe(false)
        expect(await webhooks.record('msg_missing', 'w1', retry)).toBe(false)
        expect(await webhooks.get(d1.id)).toEqual(leased(d1, 'w1', now + 1000))
        expect(await webhooks.record(d1.id, 'w1', retry)).toBe(true)
        expect(await webhooks.get(d1.id)).toEqual({ ...d1, ...retry, leaseOwner: '', leaseUntil: 0 })
        expect(await webhooks.record(d1.id, 'w1', { ...retry, attempts: 2 })).toBe(false)

        const done = { status: 'delivered' as const, attempts: 1, nextAttemptAt: now, lastError: null }
        expect(await webhooks.record(d2.id, 'w1', done)).toBe(true)
        expect(await webhooks.get(d2.id)).toEqual({ ...d2, ...done, leaseOwner: '', leaseUntil: 0 })

        expect(await webhooks.claimDue('w2', now + 199, 1000, 10)).toEqual([leased(d4, 'w2', now + 1199)])
        expect(await webhooks.claimDue('w2', now + 200, 1000, 10)).toEqual([
          leased({ ...d1, ...retry }, 'w2', now + 1200),
        ])
        // d5's lease by w1 ran out; delivered and failed ones are never claimed.
        expect(await webhooks.claimDue('w3', now + 1000, 1000, 10)).toEqual([leased(d5, 'w3', now + 2000)])
        expect(await webhooks.listByTask(task)).toEqual([
          leased({ ...d1, ...retry }, 'w2', now + 1200),
          { ...d2, ...done },
          d3,
          leased(d4, 'w2', now + 1199),
        ])
      })
      it('claimDue with a share: the backlog of one account leaves room for the delivery of another', async () => {
        const { webhooks } = await openStore()
        const flood = Array.from({ length: 8 }, (_, n) =>
          deliveryFixture(taskId(), `a${n}`, { accountId: 'acct-a', nextAttemptAt: T0 + n }),
        )
        const victim = deliveryFixture(taskId(), 'b', { accountId: 'acct-b', nextAttemptAt: T0 + 50 })
        for (const d of [...flood, victim]) await webhooks.enqueue(d)
        const share = { perAccount: 3, busy: new Map([['acct-a', 1]]) }
        const claimed = await webhooks.claimDue('w', T0 + 100, 1000, 16, share)
        expect(ids(claimed)).toEqual([flood[0]!.id, flood[1]!.id, victim.id])
        expect((await webhooks.get(victim.id))!.leaseOwner).toBe('w')
        expect((await webhooks.get(flood[2]!.id))!.leaseOwner).toBe('')
      })
    })

    describe('secrets', () => {
      it('getOrCreate creates once; get and set', async () => {
        const { secrets } = await openStore()
        expect(await secrets.get('webhook:acct-a')).toBeNull()
        expect(await secrets.getOrCreate('webhook:acct-a', () => 'whsec_first')).toBe('whsec_first')
        const unused = vi.fn(() => 'whsec_second')
        expect(await secrets.getOrCreate('webhook:acct-a', unused)).toBe('whsec_first')
        expect(unused).not.toHaveBeenCalled()
        expect(await secrets.get('webhook:acct-a')).toBe('whsec_first')

        await secrets.set('webhook:acct-a', 'whsec_rotated')
        expect(await secrets.get('webhook:acct-a')).toBe('whsec_rotated')
        expect(await secrets.getOrCreate('webhook:acct-a', unused)).toBe('whsec_rotated')
        await secrets.set('output-key', 'k1')
        expect(await secrets.get('output-key')).toBe('k1')
        expect(await secrets.get('webhook:acct-a')).toBe('whsec_rotated')
      })

      it('racing getOrCreate calls agree on one value', async () => {
        const { secrets } = await openStore()
        const values = await Promise.all(['v1', 'v2', 'v3'].map((v) => secrets.getOrCreate('race', () => v)))
        expect(new Set(values).size).toBe(1)
        expect(['v1', 'v2', 'v3']).toContain(values[0])
        expect(await secrets.get('race')).toBe(values[0])
      })
    })

    // Memory has no database to share: these are not registered for it (rather than skipped).
    if (shared) describeShared()
  })

  function describeShared(): void {
    describe('two stores on one database', () => {
      it('racing claims never hand one task to both', async () => {
        const { store, another } = await open()
        if (!another) throw new Error(`${name}: a shared backend must give \`another\``)
        const other = await another()
        const all = Array.from({ length: 20 }, (_, n) => taskFixture({ nextRunAt: T0 + n }))
        for (const t of all) await store.tasks.create(t, 0)

        for (let round = 0; round < 3; round++) {
          const now = T0 + 100 + round * 10_000
          const [a, b] = await Promise.all([
            store.tasks.claimDue('a', now, 5000, 12),
            other.tasks.claimDue('b', now, 5000, 12),
          ])
          const rest = await store.tasks.claimDue('c', now, 5000, 20)
          const taken = [...ids(a), ...ids(b), ...ids(rest)]
          expect(new Set(taken).size).toBe(taken.length)
          expect(new Set(taken)).toEqual(new Set(ids(all)))
          expect(a.length).toBeLessThanOrEqual(12)
          expect(b.length).toBeLessThanOrEqual(12)
          for (const t of a) expect((await other.tasks.get(t.id))!.leaseOwner).toBe('a')
          for (const t of b) expect((await store.tasks.get(t.id))!.leaseOwner).toBe('b')
        }
      })

      it('racing claims with a share never hand one task to both, and keep each share', async () => {
        const { store, another } = await open()
        if (!another) throw new Error(`${name}: a shared backend must give \`another\``)
        const other = await another()
        const all = Array.from({ length: 24 }, (_, n) =>
          taskFixture({ accountId: `acct-${n % 3}`, nextRunAt: T0 + n }),
        )
        for (const t of all) await store.tasks.create(t, 0)
        const share = { perAccount: 3, busy: new Map<string, number>() }
        const [a, b] = await Promise.all([
          store.tasks.claimDue('a', T0 + 100, 5000, 8, share),
          other.tasks.claimDue('b', T0 + 100, 5000, 8, share),
        ])
        const taken = [...ids(a), ...ids(b)]
        expect(new Set(taken).size).toBe(taken.length)
        for (const claimed of [a, b]) {
          for (const acct of ['acct-0', 'acct-1', 'acct-2']) {
            expect(claimed.filter((t) => t.accountId === acct).length).toBeLessThanOrEqual(3)
          }
        }
        const rest = await store.tasks.claimDue('c', T0 + 100, 5000, 30)
        expect(new Set([...taken, ...ids(rest)])).toEqual(new Set(ids(all)))
      })

      it('racing delivery claims never hand one delivery to both', async () => {
        const { store, another } = await open()
        if (!another) throw new Error(`${name}: a shared backend must give \`another\``)
        const other = await another()
        const task = taskId()
        const all = Array.from({ length: 20 }, (_, n) =>
          deliveryFixture(task, `e${n}`, { nextAttemptAt: T0 + n, createdAt: T0 + n }),
        )
        for (const d of all) await store.webhooks.enqueue(d)
        const [a, b] = await Promise.all([
          store.webhooks.claimDue('a', T0 + 100, 5000, 12),
          other.webhooks.claimDue('b', T0 + 100, 5000, 12),
        ])
        const rest = await store.webhooks.claimDue('c', T0 + 100, 5000, 20)
        const taken = [...ids(a), ...ids(b), ...ids(rest)]
        expect(new Set(taken).size).toBe(taken.length)
        expect(new Set(taken)).toEqual(new Set(ids(all)))
        expect(a.length).toBeLessThanOrEqual(12)
        expect(b.length).toBeLessThanOrEqual(12)
      })

      it('racing getOrCreate from two stores agree', async () => {
        const { store, another } = await open()
        if (!another) throw new Error(`${name}: a shared backend must give \`another\``)
        const other = await another()
        const [x, y] = await Promise.all([
          store.secrets.getOrCreate('shared', () => 'from-a'),
          other.secrets.getOrCreate('shared', () => 'from-b'),
        ])
        expect(x).toBe(y)
        expect(await other.secrets.get('shared')).toBe(x)
      })

      it('everything survives closing the store and opening it again', async () => {
        const { store, close, another } = await open()
        if (!another) throw new Error(`${name}: a shared backend must give \`another\``)
        const t = taskFixture({
          upstreamState: { job: 'persist' },
          idempotencyKey: 'persist-key',
          requestHash: 'ff'.repeat(32),
        })
        await store.tasks.create(t, 0)
        const [leased] = await store.tasks.claimDue('w', T0, 60_000, 1)
        const o = outputFixture({ taskId: t.id })
        await store.outputs.put(o)
        const d = deliveryFixture(t.id, 'completed')
        await store.webhooks.enqueue(d)
        await store.secrets.set('persist', 'value')
        await close()

        const reopened = await another()
        expect(await reopened.tasks.get(t.id)).toEqual(leased)
        expect(await reopened.tasks.claimDue('x', T0 + 59_999, 1000, 10)).toEqual([])
        expect(await reopened.outputs.get(o.id)).toEqual(o)
        expect(await reopened.webhooks.listByTask(t.id)).toEqual([d])
        expect(await reopened.secrets.get('persist')).toBe('value')
        const dup = taskFixture({ idempotencyKey: 'persist-key', createdAt: T0 + 1 })
        expect(await reopened.tasks.create(dup, 0)).toEqual({ task: leased, created: false })
      })
    })
  }
}
