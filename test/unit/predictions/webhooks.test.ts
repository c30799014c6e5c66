import { createHmac, timingSafeEqual } from 'node:crypto'
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { afterEach, describe, expect, it, vi } from 'vitest'
import type { LookupAll } from '../../../src/http/address-guard.ts'
import { createMemoryTaskStores } from '../../../src/store/memory/tasks.ts'
import type { WebhookStore } from '../../../src/store/types.ts'
import { generateWebhookSecret } from '../../../src/predictions/webhook-signing.ts'
import {
  buildDelivery,
  createWebhookSender,
  nextDelay,
  type WebhookConfig,
  type WebhookSenderDeps,
} from '../../../src/predictions/webhooks.ts'
import { startReceiver, type Receiver, type ReceivedRequest } from '../../support/receiver.ts'

const T0 = 1_700_000_000_000
const TASK = { id: '0123456789abcdef0123456789abcdef', accountId: 'acct_1' }
const BODY = '{"id":"0123456789abcdef0123456789abcdef","status":"success","output":["https://gw/o/out_1"]}'

/** A receiver's check, from the Standard Webhooks spec, independent of the signing code. */
function signatureValid(secret: string, r: ReceivedRequest): boolean {
  const id = String(r.headers['webhook-id'])
  const ts = String(r.headers['webhook-timestamp'])
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64')
  const expected = createHmac('sha256', key).update(`${id}.${ts}.${r.body}`).digest()
  const given = Buffer.from(String(r.headers['webhook-signature']).replace(/^v1,/, ''), 'base64')
  return given.length === expected.length && timingSafeEqual(given, expected)
}

const receivers: Receiver[] = []
async function receive(status: (index: number) => number): Promise<Receiver> {
  const r = await startReceiver((_req, res, i) => res.writeHead(status(i)).end('ok'))
  receivers.push(r)
  return r
}
afterEach(async () => {
  await Promise.all(receivers.splice(0).map((r) => r.close()))
})

interface Harness {
  store: WebhookStore
  secret: string
  clock: { t: number }
  logs: string[]
  sender(owner?: string): ReturnType<typeof createWebhookSender>
}

function harness(config: Partial<WebhookConfig>, extra: Partial<WebhookSenderDeps> = {}): Harness {
  const store = createMemoryTaskStores().webhooks
  const secret = generateWebhookSecret()
  const clock = { t: T0 }
  const logs: string[] = []
  const log = pino(
    { level: 'info' },
    new Writable({
      write(chunk: Buffer, _enc, cb) {
        logs.push(chunk.toString())
        cb()
      },
    }),
  )
  const full: WebhookConfig = {
    schedule: [1_000, 5_000],
    maxAttempts: 5,
    timeoutMs: 5_000,
    allowHttp: true,
    allowedHosts: ['127.0.0.1'],
    concurrency: 16,
    accountConcurrency: 4,
    ...config,
  }
  return {
    store,
    secret,
    clock,
    logs,
    sender: (owner = 'instance-a') =>
      createWebhookSender({
        store,
        secrets: { secretFor: async (accountId) => (accountId === TASK.accountId ? secret : 'whsec_wrong') },
        config: full,
        now: () => clock.t,
        log,
        owner,
        leaseMs: 60_000,
        random: () => 0.5, // no jitter: the schedule's waits exactly
        ...extra,
      }),
  }
}

describe('nextDelay', () => {
  const schedule = [1_000, 5_000, 20_000]

  it('waits schedule[n-1] before retry n and repeats the last entry beyond the schedule', () => {
    const none = () => 0.5
    expect(nextDelay(1, schedule, none)).toBe(1_000)
    expect(nextDelay(2, schedule, none)).toBe(5_000)
    expect(nextDelay(3, schedule, none)).toBe(20_000)
    expect(nextDelay(4, schedule, none)).toBe(20_000)
    expect(nextDelay(40, schedule, none)).toBe(20_000)
  })

  it('adds jitter of at most ±20 %', () => {
    expect(nextDelay(2, schedule, () => 0)).toBe(4_000)
    expect(nextDelay(2, schedule, () => 0.999999)).toBe(6_000)
    expect(nextDelay(2, schedule, () => 0.75)).toBe(5_500)
    for (let i = 0; i < 200; i++) {
      const d = nextDelay(1, schedule)
      expect(d).toBeGreaterThanOrEqual(800)
      expect(d).toBeLessThanOrEqual(1_200)
    }
  })
})

describe('buildDelivery', () => {
  it('is pending, due now, with an id stable for the task', () => {
    const d = buildDelivery(TASK, 'https://hooks.example.com/in', BODY, 'task.finished', T0)
    expect(d).toEqual({
      id: `msg_${TASK.id}`,
      taskId: TASK.id,
      accountId: TASK.accountId,
      url: 'https://hooks.example.com/in',
      body: BODY,
      status: 'pending',
      attempts: 0,
      nextAttemptAt: T0,
      lastError: null,
      leaseOwner: '',
      leaseUntil: 0,
      createdAt: T0,
    })
    expect(buildDelivery(TASK, 'https://other/', '{}', 'task.finished', T0 + 5).id).toBe(d.id)
  })
})

describe('webhook sender', () => {
  it('retries a failing receiver with the same id and body, each attempt signed, until a 2xx', async () => {
    const receiver = await receive((i) => (i < 2 ? 500 : 200))
    const h = harness({})
    const delivery = buildDelivery(TASK, `${receiver.origin}/hook?token=abc`, BODY, 'task.finished', T0)
    await h.store.enqueue(delivery)
    const sender = h.sender()

    expect(await sender.runOnce()).toBe(1)
    expect(await h.store.get(delivery.id)).toMatchObject({
      status: 'pending',
      attempts: 1,
      nextAttemptAt: T0 + 1_000,
      lastError: 'receiver answered HTTP 500',
    })
    // Not due yet: nothing is sent.
    h.clock.t = T0 + 999
    expect(await sender.runOnce()).toBe(0)

    h.clock.t = T0 + 1_000
    expect(await sender.runOnce()).toBe(1)
    expect(await h.store.get(delivery.id)).toMatchObject({
      status: 'pending',
      attempts: 2,
      nextAttemptAt: T0 + 6_000,
    })

    h.clock.t = T0 + 6_000
    expect(await sender.runOnce()).toBe(1)
    expect(await h.store.get(delivery.id)).toMatchObject({
      status: 'delivered',
      attempts: 3,
      lastError: null,
    })

    h.clock.t = T0 + 10_000_000
    expect(await sender.runOnce()).toBe(0)

    expect(receiver.requests).toHaveLength(3)
    const stamps = [T0, T0 + 1_000, T0 + 6_000].map((t) => String(Math.floor(t / 1000)))
    receiver.requests.forEach((r, i) => {
      expect(r.method).toBe('POST')
      expect(r.url).toBe('/hook?token=abc')
      expect(r.body).toBe(BODY)
      expect(r.headers).toMatchObject({
        'content-type': 'application/json',
        'user-agent': 'Junction-Webhooks/1',
        'webhook-id': `msg_${TASK.id}`,
        'webhook-timestamp': stamps[i],
      })
      expect(signatureValid(h.secret, r)).toBe(true)
    })

    // Neither the secret nor the body nor the receiver's token reaches the log.
    const logged = h.logs.join('')
    expect(h.logs).toHaveLength(3)
    expect(logged).toContain('webhook delivered')
    expect(logged).not.toContain(h.secret.slice('whsec_'.length))
    expect(logged).not.toContain('out_1')
    expect(logged).not.toContain('token=abc')
  })

  it('marks a delivery failed after maxAttempts, then sends no more', async () => {
    const receiver = await receive(() => 503)
    const h = harness({ maxAttempts: 3 })
    const delivery = buildDelivery(TASK, `${receiver.origin}/hook`, BODY, 'task.finished', T0)
    await h.store.enqueue(delivery)
    const sender = h.sender()
    for (let i = 0; i < 3; i++) {
      expect(await sender.runOnce()).toBe(1)
      h.clock.t = (await h.store.get(delivery.id))!.nextAttemptAt
    }
    expect(await h.store.get(delivery.id)).toMatchObject({
      status: 'failed',
      attempts: 3,
      lastError: 'receiver answered HTTP 503',
    })
    h.clock.t += 100_000_000
    expect(await sender.runOnce()).toBe(0)
    expect(receiver.requests).toHaveLength(3)
  })

  it('counts a redirect as a failure and does not follow it', async () => {
    const target = await receive(() => 200)
    const redirecting = await startReceiver((_req, res) =>
      res.writeHead(307, { location: `${target.origin}/` }).end(),
    )
    receivers.push(redirecting)
    const h = harness({})
    const delivery = buildDelivery(TASK, `${redirecting.origin}/hook`, BODY, 'task.finished', T0)
    await h.store.enqueue(delivery)
    expect(await h.sender().runOnce()).toBe(1)
    expect(await h.store.get(delivery.id)).toMatchObject({
      status: 'pending',
      lastError: 'receiver answered HTTP 307',
    })
    expect(redirecting.requests).toHaveLength(1)
    expect(target.requests).toHaveLength(0)
  })

  it('never sends to a host resolving to loopback under the default policy', async () => {
    const receiver = await receive(() => 200)
    const lookup: LookupAll = async () => [{ address: '127.0.0.1', family: 4 }]
    // The default policy (https only, no exempt hosts), and plain http allowed but no host exempt.
    const cases: [boolean, string][] = [
      [false, `https://hooks.test:${receiver.port}/hook`],
      [true, `http://hooks.test:${receiver.port}/hook`],
    ]
    for (const [allowHttp, url] of cases) {
      const h = harness({ allowHttp, allowedHosts: [], maxAttempts: 2 }, { lookup })
      const delivery = buildDelivery(TASK, url, BODY, 'task.finished', T0)
      await h.store.enqueue(delivery)
      const sender = h.sender()
      expect(await sender.runOnce()).toBe(1)
      const after = await h.store.get(delivery.id)
      expect(after).toMatchObject({ status: 'pending', attempts: 1 })
      expect(after!.lastError).toMatch(/address that is not allowed/)
      h.clock.t = after!.nextAttemptAt
      expect(await sender.runOnce()).toBe(1)
      expect(await h.store.get(delivery.id)).toMatchObject({ status: 'failed', attempts: 2 })
    }
    expect(receiver.requests).toHaveLength(0)
  })

  it('reaches an allowed host by its pinned address', async () => {
    const receiver = await receive(() => 204)
    const lookup: LookupAll = async () => [{ address: '127.0.0.1', family: 4 }]
    const h = harness({ allowHttp: true, allowedHosts: ['hooks.test'] }, { lookup })
    const delivery = buildDelivery(TASK, `http://hooks.test:${receiver.port}/hook`, BODY, 'task.finished', T0)
    await h.store.enqueue(delivery)
    expect(await h.sender().runOnce()).toBe(1)
    expect(await h.store.get(delivery.id)).toMatchObject({ status: 'delivered', attempts: 1 })
    expect(receiver.requests[0]!.headers.host).toBe(`hooks.test:${receiver.port}`)
  })

  it('sends each attempt once when two instances race on one store', async () => {
    const receiver = await receive(() => 200)
    const h = harness({})
    const ids: string[] = []
    for (let i = 0; i < 5; i++) {
      const d = buildDelivery(
        { id: `task${i}`, accountId: TASK.accountId },
        `${receiver.origin}/h`,
        BODY,
        'task.finished',
        T0,
      )
      ids.push(d.id)
      await h.store.enqueue(d)
    }
    const a = h.sender('instance-a')
    const b = h.sender('instance-b')
    const counts = await Promise.all([a.runOnce(), b.runOnce(), a.runOnce(), b.runOnce()])
    expect(counts.reduce((x, y) => x + y, 0)).toBe(5)
    expect(receiver.requests.map((r) => r.headers['webhook-id']).sort()).toEqual([...ids].sort())
    for (const id of ids) expect(await h.store.get(id)).toMatchObject({ status: 'delivered', attempts: 1 })
    h.clock.t += 10_000_000
    expect(await Promise.all([a.runOnce(), b.runOnce()])).toEqual([0, 0])
    expect(receiver.requests).toHaveLength(5)
  })

  it('stop waits for the attempt in flight to be recorded', async () => {
    let release: () => void = () => {}
    const receiver = await startReceiver((_req, res) => {
      release = () => res.writeHead(200).end()
    })
    receivers.push(receiver)
    const h = harness({})
    const delivery = buildDelivery(TASK, `${receiver.origin}/hook`, BODY, 'task.finished', T0)
    await h.store.enqueue(delivery)
    const sender = h.sender()
    sender.start(1)
    await receiver.received(1)
    let stopped = false
    const stopping = sender.stop().then(() => {
      stopped = true
    })
    await new Promise((resolve) => setImmediate(resolve))
    expect(stopped).toBe(false)
    release()
    await stopping
    expect(await h.store.get(delivery.id)).toMatchObject({ status: 'delivered', attempts: 1 })
    expect(receiver.requests).toHaveLength(1)
  })
})

describe('webhook sender: scheduling per account', () => {
  /** A receiver that never answers: each attempt to it lasts the whole `timeoutMs`. */
  async function hanging(): Promise<Receiver> {
    const r = await startReceiver(() => {})
    receivers.push(r)
    return r
  }
  const secret = generateWebhookSecret()
  const anySecret = { secrets: { secretFor: async () => secret } }
  const delivery = (accountId: string, n: number, url: string) =>
    buildDelivery({ id: `${accountId}-task-${n}`, accountId }, url, BODY, 'task.finished', T0 + n)

  it("one account's hanging receivers hold only its share: another account's webhook goes out at once", async () => {
    const stuck = await hanging()
    const fast = await receive(() => 200)
    const h = harness({ timeoutMs: 5_000, concurrency: 16, accountConcurrency: 4 }, anySecret)
    // 48 deliveries of account a, all older than b's one.
    for (let n = 0; n < 48; n++) await h.store.enqueue(delivery('acct-a', n, `${stuck.origin}/a${n}`))
    const victim = delivery('acct-b', 100, `${fast.origin}/b`)
    await h.store.enqueue(victim)
    h.clock.t = T0 + 1_000
    const sender = h.sender()
    sender.start(20)
    try {
      await fast.received(1)
      await vi.waitFor(async () => expect((await h.store.get(victim.id))!.status).toBe('delivered'))
      // b's webhook was delivered while every attempt of a still hangs, and a holds 4 slots, not 16.
      await stuck.received(4)
      expect(stuck.requests).toHaveLength(4)
      for (let n = 0; n < 48; n++) {
        expect((await h.store.get(`msg_acct-a-task-${n}`))!.attempts).toBe(0)
      }
      expect(h.logs.join('')).not.toContain('webhook attempt failed')
    } finally {
      await stuck.close()
      await sender.stop()
    }
  }, 30_000)

  it('a delivery does not wait for the others claimed with it', async () => {
    const stuck = await hanging()
    const fast = await receive(() => 204)
    const h = harness({ timeoutMs: 5_000, concurrency: 16, accountConcurrency: 2 }, anySecret)
    // One hanging receiver, then twenty quick ones of the same account, two at a time at most: more
    // than one claim of 16 holds.
    await h.store.enqueue(delivery('acct-a', 0, `${stuck.origin}/slow`))
    for (let n = 1; n <= 20; n++) await h.store.enqueue(delivery('acct-a', n, `${fast.origin}/q${n}`))
    h.clock.t = T0 + 1_000
    const sender = h.sender()
    sender.start(20)
    try {
      // All twenty go through the one free slot while the first attempt still hangs.
      await fast.received(20)
      await vi.waitFor(async () => {
        for (let n = 1; n <= 20; n++) {
          expect((await h.store.get(`msg_acct-a-task-${n}`))!.status).toBe('delivered')
        }
      })
      expect(stuck.requests).toHaveLength(1)
      expect((await h.store.get('msg_acct-a-task-0'))!.attempts).toBe(0)
    } finally {
      await stuck.close()
      await sender.stop()
    }
  }, 30_000)
})
