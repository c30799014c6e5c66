import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { beforeEach, describe, expect, it, onTestFinished } from 'vitest'
import { hashKey } from '../../src/auth/index.ts'
import { GatewayError, UpstreamError } from '../../src/errors.ts'
import type { MediaAdapter, MediaJob, MediaStep } from '../../src/providers/async-media/types.ts'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'
import type { JsonValue } from '../../src/domain/media.ts'

// The predictions API over the real app (inject), its runner driven step by step with a fake clock and
// a scripted media adapter in place of the mock's: creation, lookup, hosted outputs and their signed
// URLs, cancel, timeouts, failures, billing and idempotency. The adapters themselves are tested
// against fake upstream servers elsewhere.

const PNG = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex')

interface Script {
  submits: MediaJob[]
  polls: JsonValue[]
  cancels: JsonValue[]
  /** What submit answers; then each poll takes the next of `pollSteps`. */
  submit: () => MediaStep | Promise<MediaStep>
  pollSteps: (() => MediaStep | Promise<MediaStep>)[]
}

function scripted(): { adapter: MediaAdapter; script: Script } {
  const script: Script = {
    submits: [],
    polls: [],
    cancels: [],
    submit: () => ({ state: 'pending', job: { upstreamId: 'job-1' } }),
    pollSteps: [],
  }
  const adapter: MediaAdapter = {
    async submit(job) {
      script.submits.push(job)
      return script.submit()
    },
    async poll(_job, state) {
      script.polls.push(state)
      const next = script.pollSteps.shift()
      return next ? next() : { state: 'pending', job: state }
    },
    async cancel(_job, state) {
      script.cancels.push(state)
    },
  }
  return { adapter, script }
}

const done = (n = 1): MediaStep => ({
  state: 'done',
  result: {
    outputs: Array.from({ length: n }, () => ({
      type: 'image' as const,
      contentType: 'image/png',
      data: PNG,
    })),
    usage: { kind: 'images', count: n, tier: '1K' },
  },
})

/** The backend of the describe block running (each scenario runs on memory and on SQLite). */
let backend: 'memory' | 'sqlite' = 'memory'

async function setup(file: unknown = undefined, env: Record<string, string> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'junction-pred-'))
  if (backend === 'sqlite') env = { GATEWAY_DATABASE_URL: `sqlite:${join(dir, 'junction.db')}`, ...env }
  const clock = { t: 1_800_000_000_000 }
  const { adapter, script } = scripted()
  const gw: TestGateway = await startGateway({
    env: { GATEWAY_OUTPUTS_DIR: dir, ...env },
    file,
    overrides: { now: () => clock.t, background: false, mediaAdapterFor: () => adapter },
  })
  // Removed once the gateway is closed: afterEach hooks run before onTestFinished ones, and a
  // directory removed under an open SQLite database can be written to again (ENOTEMPTY).
  onTestFinished(async () => {
    await gw.close()
    rmSync(dir, { recursive: true, force: true })
  })
  const post = (payload: unknown, headers: Record<string, string> = {}) =>
    gw.app.inject({
      method: 'POST',
      url: '/v1/predictions',
      headers: { ...devAuth, ...headers },
      payload: payload as object,
    })
  const get = (id: string, auth = devAuth) =>
    gw.app.inject({ method: 'GET', url: `/v1/predictions/${id}`, headers: auth })
  const credits = async (auth = devAuth) =>
    (await gw.app.inject({ method: 'GET', url: '/v1/credits', headers: auth })).json().data
  /** Advances the clock past every poll wait and runs one step of each due task. */
  const step = async (ms = 60_000) => {
    clock.t += ms
    return gw.deps.runner.runOnce()
  }
  return { gw, clock, script, post, get, credits, step }
}

describe.each(['memory', 'sqlite'] as const)('POST /v1/predictions → runner → GET (%s)', (store) => {
  beforeEach(() => {
    backend = store
  })

  it('returns processing at once, then success with a hosted PNG, exact usage, a generation record and the charge', async () => {
    const { gw, script, post, get, credits, step } = await setup()
    const before = await credits()
    const created = await post({ model: 'mock/image', input: { prompt: 'a red fox', num_images: 2 } })
    expect(created.statusCode).toBe(200)
    const { task_id: id, task_status } = created.json().data
    expect(id).toMatch(/^[0-9a-f]{32}$/)
    expect(task_status).toBe('processing')
    expect(script.submits).toHaveLength(0)

    const processing = (await get(id)).json()
    expect(processing).toMatchObject({ code: '0', data: { task_id: id, task_status: 'processing' } })
    expect(processing.usage).toBeUndefined()
    expect(processing.data.output).toBeUndefined()

    script.pollSteps.push(() => done(2))
    expect(await step()).toBe(1) // submit → pending
    expect(script.submits[0]).toMatchObject({
      family: 'image',
      taskId: id,
      upstreamModel: 'image',
      input: { prompt: 'a red fox', num_images: 2, image_urls: [] },
    })
    expect((await get(id)).json().data.task_status).toBe('processing')
    await step() // poll → done
    expect(script.polls).toEqual([{ upstreamId: 'job-1' }])

    const body = (await get(id)).json()
    expect(body.data.task_status).toBe('success')
    expect(body.data.output).toHaveLength(2)
    // mock/image: $0.01 an image at 1K, no discount on the development account.
    expect(body.usage).toEqual({ upstream_cost: 0.02, discount: 0, discount_percent: 0, cost: 0.02 })
    for (const item of body.data.output) {
      expect(item.type).toBe('image')
      const url = new URL(item.image)
      expect(url.pathname).toMatch(/^\/v1\/outputs\/out_/)
      const res = await gw.app.inject({ method: 'GET', url: url.pathname + url.search })
      expect(res.statusCode).toBe(200)
      expect(res.headers['content-type']).toBe('image/png')
      expect(res.rawPayload.equals(PNG)).toBe(true)
    }
    const record = (
      await gw.app.inject({ method: 'GET', url: `/v1/generation?id=${id}`, headers: devAuth })
    ).json()
    expect(record).toMatchObject({
      generationId: id,
      api: '/v1/predictions',
      model: 'mock/image',
      provider: 'mock',
    })
    expect(record.usage.cost).toBe(0.02)
    const after = await credits()
    expect(Math.round((after.total_usage - before.total_usage) * 1e6)).toBe(20_000)
    // Charged once: further runs find nothing due and change nothing.
    expect(await step()).toBe(0)
    expect((await credits()).total_usage).toBe(after.total_usage)
  })

  it('signed output URLs: a tampered signature or id is 403, an expired one 403 url_expired, none 403', async () => {
    const { gw, clock, script, post, get, step } = await setup()
    script.submit = () => done()
    const id = (await post({ model: 'mock/image', input: { prompt: 'x' } })).json().data.task_id
    await step()
    const url = new URL((await get(id)).json().data.output[0].image)
    const sig = url.searchParams.get('signature') ?? ''
    const fetch = (path: string) => gw.app.inject({ method: 'GET', url: path })
    const flipped = sig.slice(0, -1) + (sig.endsWith('A') ? 'B' : 'A')
    const tampered = await fetch(
      `${url.pathname}?expires=${url.searchParams.get('expires')}&signature=${flipped}`,
    )
    expect(tampered.statusCode).toBe(403)
    expect(tampered.json().error.code).toBe('invalid_signature')
    const longer = await fetch(
      `${url.pathname}?expires=${Number(url.searchParams.get('expires')) + 1000}&signature=${sig}`,
    )
    expect(longer.json().error.code).toBe('invalid_signature')
    const otherId = await fetch(`/v1/outputs/out_someoneelse${url.search}`)
    expect(otherId.statusCode).toBe(403)
    expect((await fetch(url.pathname)).statusCode).toBe(403)
    expect((await fetch(url.pathname + url.search)).statusCode).toBe(200)
    clock.t += 24 * 3_600_000 + 1000 // the default URL lifetime is 24 h
    const expired = await fetch(url.pathname + url.search)
    expect(expired.statusCode).toBe(403)
    expect(expired.json().error.code).toBe('url_expired')
    // A new lookup hands out a fresh URL that works.
    const fresh = new URL((await get(id)).json().data.output[0].image)
    expect((await fetch(fresh.pathname + fresh.search)).statusCode).toBe(200)
  })

  it('outputs answer one byte range with 206 and Content-Range, a range past the end with 416', async () => {
    const { gw, script, post, get, step } = await setup()
    script.submit = () => done()
    const id = (await post({ model: 'mock/image', input: { prompt: 'x' } })).json().data.task_id
    await step()
    const url = new URL((await get(id)).json().data.output[0].image)
    const fetch = (range?: string) =>
      gw.app.inject({
        method: 'GET',
        url: url.pathname + url.search,
        headers: range === undefined ? {} : { range },
      })
    const size = PNG.length
    const whole = await fetch()
    expect(whole.statusCode).toBe(200)
    expect(whole.headers['accept-ranges']).toBe('bytes')
    expect(whole.headers['content-length']).toBe(String(size))

    const head = await fetch('bytes=0-7')
    expect(head.statusCode).toBe(206)
    expect(head.headers['content-range']).toBe(`bytes 0-7/${size}`)
    expect(head.headers['content-length']).toBe('8')
    expect(head.rawPayload.equals(PNG.subarray(0, 8))).toBe(true)

    const rest = await fetch('bytes=8-')
    expect(rest.statusCode).toBe(206)
    expect(rest.headers['content-range']).toBe(`bytes 8-${size - 1}/${size}`)
    expect(rest.rawPayload.equals(PNG.subarray(8))).toBe(true)

    const tail = await fetch('bytes=-12')
    expect(tail.headers['content-range']).toBe(`bytes ${size - 12}-${size - 1}/${size}`)
    expect(tail.rawPayload.equals(PNG.subarray(size - 12))).toBe(true)

    // An end past the object is cut to it; several ranges are answered whole.
    const over = await fetch(`bytes=4-${size + 100}`)
    expect(over.headers['content-range']).toBe(`bytes 4-${size - 1}/${size}`)
    expect(over.rawPayload.equals(PNG.subarray(4))).toBe(true)
    const several = await fetch('bytes=0-1,4-5')
    expect(several.statusCode).toBe(200)
    expect(several.rawPayload.equals(PNG)).toBe(true)

    const past = await fetch(`bytes=${size}-`)
    expect(past.statusCode).toBe(416)
    expect(past.headers['content-range']).toBe(`bytes */${size}`)
    expect(past.json().error.code).toBe('range_not_satisfiable')
  })

  it('outputs are deleted after the retention: records and bytes go, the URL answers 404', async () => {
    const { gw, clock, script, post, get, step } = await setup({
      predictions: { outputRetentionMs: 3_600_000 },
    })
    script.submit = () => done()
    const id = (await post({ model: 'mock/image', input: { prompt: 'x' } })).json().data.task_id
    await step()
    const url = new URL((await get(id)).json().data.output[0].image)
    const outputId = url.pathname.split('/').at(-1) ?? ''
    const stored = await gw.deps.store.outputs.get(outputId)
    expect((await gw.deps.outputStorage.list()).map((o) => o.key)).toEqual([stored?.storageKey])
    clock.t += 3_599_000
    expect(await gw.deps.predictionsHousekeeping()).toBe(0)
    expect((await gw.app.inject({ method: 'GET', url: url.pathname + url.search })).statusCode).toBe(200)
    clock.t += 1_000
    expect(await gw.deps.predictionsHousekeeping()).toBe(1)
    expect(await gw.deps.store.outputs.get(outputId)).toBeNull()
    expect(await gw.deps.outputStorage.list()).toEqual([])
    const gone = await gw.app.inject({ method: 'GET', url: url.pathname + url.search })
    expect(gone.statusCode).toBe(404)
    expect(gone.json().error.code).toBe('output_not_found')
    // The task itself stays (30 days by default): its lookup still answers.
    expect((await get(id)).json().data.task_status).toBe('success')
  })

  it('cancel: processing → cancelled, the upstream job is cancelled, nothing billed; a second cancel is 409', async () => {
    const { gw, script, post, get, credits, step } = await setup()
    const before = await credits()
    const id = (await post({ model: 'mock/video', input: { prompt: 'waves', duration: 5 } })).json().data
      .task_id
    await step() // submitted: pending upstream
    const cancel = () =>
      gw.app.inject({ method: 'POST', url: `/v1/predictions/${id}/cancel`, headers: devAuth })
    const res = await cancel()
    expect(res.statusCode).toBe(200)
    expect(res.json().data.task_status).toBe('cancelled')
    expect(res.json().usage).toEqual({ upstream_cost: 0, discount: 0, discount_percent: 0, cost: 0 })
    expect(script.cancels).toEqual([])
    await step()
    expect(script.cancels).toEqual([{ upstreamId: 'job-1' }])
    expect(script.polls).toEqual([]) // never polled after the cancel
    const again = await cancel()
    expect(again.statusCode).toBe(409)
    expect(again.json().error.code).toBe('invalid_state')
    expect((await get(id)).json().data.task_status).toBe('cancelled')
    const after = await credits()
    expect(after.total_usage).toBe(before.total_usage)
    expect(after.balance).toBe(before.balance)
    expect(await step()).toBe(0)
  })

  it('a finished task cannot be cancelled (409), and a task no account owns or another owns is 404', async () => {
    const { gw, script, post, step } = await setup({
      accounts: [
        { id: 'owner', keys: [{ sha256: hashKey('sk-owner') }], credits: 5 },
        { id: 'other', keys: [{ sha256: hashKey('sk-other') }], credits: 5 },
      ],
    })
    script.submit = () => done()
    const owner = { authorization: 'Bearer sk-owner' }
    const id = (await post({ model: 'mock/image', input: { prompt: 'x' } }, owner)).json().data.task_id
    await step()
    const cancel = await gw.app.inject({
      method: 'POST',
      url: `/v1/predictions/${id}/cancel`,
      headers: owner,
    })
    expect(cancel.statusCode).toBe(409)
    const other = { authorization: 'Bearer sk-other' }
    for (const [method, url] of [
      ['GET', `/v1/predictions/${id}`],
      ['POST', `/v1/predictions/${id}/cancel`],
      ['GET', '/v1/predictions/0123456789abcdef0123456789abcdef'],
      ['GET', '/v1/predictions/not-an-id'],
    ] as const) {
      const res = await gw.app.inject({ method, url, headers: other })
      expect(res.statusCode).toBe(404)
      expect(res.json().error).toMatchObject({ code: 'prediction_not_found', type: 'not_found_error' })
    }
  })

  it('an upstream failure fails the task with its error and bills nothing; one the upstream billed is charged', async () => {
    const { script, post, get, credits, step } = await setup()
    const before = await credits()
    script.submit = () => ({ state: 'failed', code: 'content_filter', message: 'refused by the upstream' })
    const id = (await post({ model: 'mock/image', input: { prompt: 'x' } })).json().data.task_id
    await step()
    const failed = (await get(id)).json()
    expect(failed.data).toEqual({
      task_id: id,
      task_status: 'failed',
      error: { code: 'content_filter', message: 'refused by the upstream' },
    })
    expect(failed.usage.cost).toBe(0)
    expect((await credits()).total_usage).toBe(before.total_usage)

    script.submit = () => ({
      state: 'failed',
      code: 'upstream_failed',
      message: 'failed after generating',
      billed: { kind: 'images', count: 1, tier: '1K' },
    })
    const billedId = (await post({ model: 'mock/image', input: { prompt: 'y' } })).json().data.task_id
    await step()
    const billed = (await get(billedId)).json()
    expect(billed.data.task_status).toBe('failed')
    expect(billed.usage.cost).toBe(0.01)
    expect(Math.round(((await credits()).total_usage - before.total_usage) * 1e6)).toBe(10_000)
  })

  it('a submit refused at connect is retried with backoff; after a 5xx or a 4xx the task fails; a poll 5xx is retried', async () => {
    const { gw, script, post, get, step } = await setup()
    const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })
    script.submit = () => {
      throw new UpstreamError('upstream_error', 'upstream mock connection failed (ECONNREFUSED)', {
        provider: 'mock',
        retryable: true,
        cause: refused,
      })
    }
    const id = (await post({ model: 'mock/image', input: { prompt: 'x' } })).json().data.task_id
    await step()
    await step()
    expect(script.submits).toHaveLength(2)
    expect(await gw.deps.store.tasks.get(id)).toMatchObject({
      status: 'processing',
      runs: 2,
      upstreamState: null,
    })
    // A 503 may come after the upstream started the job: submitting again could start a second one.
    script.submit = () => {
      throw new UpstreamError('upstream_error', 'upstream answered 503', {
        provider: 'mock',
        upstreamStatus: 503,
        retryable: true,
      })
    }
    await step()
    await step()
    expect(script.submits).toHaveLength(3)
    expect((await get(id)).json().data).toMatchObject({
      task_status: 'failed',
      error: { code: 'upstream_error' },
    })

    script.submit = () => {
      throw new GatewayError('upstream_invalid_request', 'the upstream rejected the prompt')
    }
    const rejected = (await post({ model: 'mock/image', input: { prompt: 'y' } })).json().data.task_id
    await step()
    expect((await get(rejected)).json().data).toMatchObject({
      task_status: 'failed',
      error: { code: 'upstream_invalid_request', message: 'the upstream rejected the prompt' },
    })

    // Once the job exists upstream, a failed poll is simply tried again.
    script.submit = () => ({ state: 'pending', job: { upstreamId: 'job-p' } })
    script.pollSteps = [
      () => {
        throw new GatewayError('upstream_error', 'upstream answered 503', { retryable: true })
      },
    ]
    const polled = (await post({ model: 'mock/image', input: { prompt: 'z' } })).json().data.task_id
    await step()
    await step()
    expect(await gw.deps.store.tasks.get(polled)).toMatchObject({ status: 'processing', runs: 2 })
  })

  it('a submit whose instance died before recording the answer is not sent again: the task fails', async () => {
    const { gw, clock, script, post, get, credits, step } = await setup()
    const before = await credits()
    const id = (await post({ model: 'mock/image', input: { prompt: 'x' } })).json().data.task_id
    // Another instance leased the task, started its submit, and died.
    const tasks = gw.deps.store.tasks
    expect((await tasks.claimDue('dead-instance', clock.t, 60_000, 10)).map((t) => t.id)).toEqual([id])
    expect(await tasks.markSubmitting(id, 'dead-instance', clock.t)).toBe(true)
    await step(60_000) // the lease has run out: this instance takes the task over
    expect(script.submits).toHaveLength(0)
    expect((await get(id)).json().data).toMatchObject({
      task_status: 'failed',
      error: { code: 'upstream_error' },
    })
    expect((await credits()).total_usage).toBe(before.total_usage)
    expect((await gw.deps.store.ledger.credits('dev', clock.t)).reserved).toBe(0n)
  })

  it('a fault inside the gateway (a bug, ffmpeg missing) fails the task at once without its details', async () => {
    const { script, post, get, credits, step } = await setup()
    const before = await credits()
    script.submit = () => {
      throw new Error('secret internal detail')
    }
    const id = (await post({ model: 'mock/image', input: { prompt: 'x' } })).json().data.task_id
    await step()
    expect(script.submits).toHaveLength(1)
    const body = (await get(id)).json()
    expect(body.data).toMatchObject({
      task_status: 'failed',
      error: { code: 'internal_error', message: 'the task failed inside the gateway' },
    })
    expect(JSON.stringify(body)).not.toContain('secret internal detail')
    expect((await credits()).total_usage).toBe(before.total_usage)
  })

  it('a task past predictions.maxTaskMs fails with timeout, is cancelled upstream and releases its hold', async () => {
    const { gw, clock, script, post, get, credits, step } = await setup({
      predictions: { maxTaskMs: 120_000 },
    })
    const before = await credits()
    const id = (await post({ model: 'mock/video', input: { prompt: 'slow' } })).json().data.task_id
    await step(0)
    expect((await gw.deps.store.ledger.credits('dev', clock.t)).reserved).toBeGreaterThan(0n)
    await step(60_000) // still within: polled
    expect(script.polls).toHaveLength(1)
    await step(61_000) // past the deadline
    expect(script.polls).toHaveLength(1)
    expect(script.cancels).toEqual([{ upstreamId: 'job-1' }])
    expect((await get(id)).json().data).toMatchObject({ task_status: 'failed', error: { code: 'timeout' } })
    expect((await gw.deps.store.ledger.credits('dev', clock.t)).reserved).toBe(0n)
    expect((await credits()).total_usage).toBe(before.total_usage)
  })

  it('402 when the account has no credits left: nothing stored, nothing sent upstream', async () => {
    const { gw, script, step } = await setup({
      accounts: [{ id: 'broke', keys: [{ sha256: hashKey('sk-broke') }], credits: 0 }],
    })
    const res = await gw.app.inject({
      method: 'POST',
      url: '/v1/predictions',
      headers: { authorization: 'Bearer sk-broke' },
      payload: { model: 'mock/image', input: { prompt: 'x' } },
    })
    expect(res.statusCode).toBe(402)
    expect(res.json().error.code).toBe('insufficient_credits')
    expect(await step()).toBe(0)
    expect(script.submits).toHaveLength(0)
  })

  it('the hold covers the task price, so concurrent tasks cannot overdraw the balance', async () => {
    // $0.05: mock/video-a at 720P is $0.02 a second and 8 s by default ($0.16 at the dearest 4K: $0.64).
    const { gw, post } = await setup({
      accounts: [{ id: 'small', keys: [{ sha256: hashKey('sk-small') }], credits: 0.05 }],
    })
    const auth = { authorization: 'Bearer sk-small' }
    const first = await gw.app.inject({
      method: 'POST',
      url: '/v1/predictions',
      headers: auth,
      payload: { model: 'mock/video-a', input: { prompt: 'x' } },
    })
    expect(first.statusCode).toBe(200)
    const second = await gw.app.inject({
      method: 'POST',
      url: '/v1/predictions',
      headers: auth,
      payload: { model: 'mock/video-a', input: { prompt: 'y' } },
    })
    expect(second.statusCode).toBe(402)
    void post
  })

  it('Idempotency-Key: a repeat returns the first task and starts nothing; another body is 409', async () => {
    const { gw, script, post, step } = await setup()
    const body = { model: 'mock/image', input: { prompt: 'same', num_images: 1 } }
    const a = await post(body, { 'idempotency-key': 'k-1' })
    const b = await post(
      { input: { num_images: 1, prompt: 'same' }, model: 'mock/image' },
      { 'idempotency-key': 'k-1' },
    )
    expect(b.statusCode).toBe(200)
    expect(b.json().data.task_id).toBe(a.json().data.task_id)
    const c = await post({ ...body, input: { prompt: 'different' } }, { 'idempotency-key': 'k-1' })
    expect(c.statusCode).toBe(409)
    expect(c.json().error).toMatchObject({ code: 'idempotency_key_reused', param: 'Idempotency-Key' })
    await step()
    expect(script.submits).toHaveLength(1)
    const d = await post(body, { 'idempotency-key': 'k-2' })
    expect(d.json().data.task_id).not.toBe(a.json().data.task_id)
    // Only the first task and k-2's hold credits: the repeat's hold was released.
    const reserved = (await gw.deps.store.ledger.credits('dev', Date.now())).reserved
    expect(reserved).toBeGreaterThan(0n)
  })

  it('Idempotency-Key: a retry returns its task whatever the balance (the first hold uses it all)', async () => {
    // $0.16: one mock/video-a task holds $0.16 (720P, 8 s), all of it, so a second task is 402 (and
    // so is any request checked for a balance above zero before its body is read).
    const { gw, script, step } = await setup({
      accounts: [{ id: 'tight', keys: [{ sha256: hashKey('sk-tight') }], credits: 0.16 }],
    })
    const send = (key: string) =>
      gw.app.inject({
        method: 'POST',
        url: '/v1/predictions',
        headers: { authorization: 'Bearer sk-tight', 'idempotency-key': key },
        payload: { model: 'mock/video-a', input: { prompt: 'once' } },
      })
    const first = await send('retry-1')
    expect(first.statusCode).toBe(200)
    const id = first.json().data.task_id
    const retry = await send('retry-1')
    expect(retry.statusCode, retry.body).toBe(200)
    expect(retry.json().data).toEqual({ task_id: id, task_status: 'processing' })
    // A new key is a new task, which the balance cannot hold.
    expect((await send('retry-2')).statusCode).toBe(402)
    // Still the same task once it has ended and been charged.
    script.submit = () =>
      ({
        state: 'done',
        result: { outputs: [], usage: { kind: 'video', seconds: 8, resolution: '720P' } },
      }) as MediaStep
    await step()
    expect(script.submits).toHaveLength(1)
    const later = await send('retry-1')
    expect(later.statusCode, later.body).toBe(200)
    expect(later.json().data.task_id).toBe(id)
  })

  it('refuses before anything is stored: unknown model 404, a chat model 400, a wrong function 400, bad input 400 input.<field>', async () => {
    const { script, post, step } = await setup()
    const cases: [unknown, number, string, string | null][] = [
      [{ model: 'mock/nope', input: { prompt: 'x' } }, 404, 'model_not_found', 'model'],
      [{ model: 'mock/chat', input: { prompt: 'x' } }, 400, 'invalid_value', 'model'],
      [{ model: 'mock/image', function: 'video', input: { prompt: 'x' } }, 400, 'invalid_value', 'function'],
      [{ model: 'mock/image', input: {} }, 400, 'missing_field', 'input.prompt'],
      [
        { model: 'mock/video-a', input: { prompt: 'x', duration: 5 } },
        400,
        'invalid_value',
        'input.duration',
      ],
      [
        { model: 'mock/speech', input: { prompt: 'x', voice: 'Nobody' } },
        400,
        'invalid_value',
        'input.voice',
      ],
      [{ model: 'mock/image' }, 400, 'missing_field', 'input'],
      [{ model: 'mock/image', input: { prompt: 'x' }, extra: 1 }, 400, 'unsupported_parameter', 'extra'],
      [
        { model: 'mock/video-c', input: { prompt: 'x', seed: 1 } },
        400,
        'unsupported_parameter',
        'input.seed',
      ],
    ]
    for (const [payload, status, code, param] of cases) {
      const res = await post(payload)
      expect(res.statusCode, JSON.stringify(payload)).toBe(status)
      expect(res.json().error, JSON.stringify(payload)).toMatchObject({ code, param })
    }
    expect(await step()).toBe(0)
    expect(script.submits).toHaveLength(0)
  })

  it('GET /v1/models lists the media models with their type, input family and prices', async () => {
    const { gw } = await setup()
    const list = (await gw.app.inject({ method: 'GET', url: '/v1/models', headers: devAuth })).json().data
    const bySlug = Object.fromEntries(list.map((m: { id: string }) => [m.id, m]))
    expect(bySlug['mock/image']).toMatchObject({
      type: 'image',
      input_family: 'image',
      pricing: { image_per_image: { '1K': 0.01, '2K': 0.02, '4K': 0.04 } },
    })
    expect(bySlug['mock/speech']).toMatchObject({ type: 'speech', input_family: 'speech' })
    expect(bySlug['mock/video-b']).toMatchObject({ type: 'video', input_family: 'video-b' })
    expect(bySlug['mock/chat'].input_family).toBeUndefined()
  })
})
