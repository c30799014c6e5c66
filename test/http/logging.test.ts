import { Writable } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createLogger } from '../../src/logger.ts'
import { sendJson, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.ts'
import { startGateway, type TestGateway } from '../support/gateway.ts'

const upstreamKey = 'sk-upstream-secret-key-0123456789'
const clientKey = 'sk-client-secret-key-abcdefghij'

describe('logs', () => {
  let lines: string[]
  let gw: TestGateway
  let fake: FakeUpstream
  beforeAll(async () => {
    lines = []
    const sink = new Writable({
      write(chunk, _enc, cb) {
        lines.push(String(chunk))
        cb()
      },
    })
    fake = await startFakeUpstream({
      // Echoes the key it was given, as a careless provider might.
      'POST /v1/chat/completions': (req, res) =>
        sendJson(res, 500, { error: { message: `bad key ${String(req.headers.authorization)}` } }),
    })
    gw = await startGateway({
      env: { OPENAI_API_KEY: upstreamKey, OPENAI_BASE_URL: `${fake.origin}/v1` },
      file: { accounts: [{ id: 'acme', keys: [clientKey], credits: 10 }] },
      overrides: { log: createLogger('trace', sink) },
    })
  })
  afterAll(async () => {
    await gw.close()
    await fake.close()
  })

  it('carry the request id and never a key or the Authorization header', async () => {
    const ok = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${clientKey}` },
      payload: { model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }] },
    })
    expect(ok.statusCode).toBe(200)
    const failed = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${clientKey}` },
      payload: { model: 'openai/gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] },
    })
    expect(failed.statusCode).toBe(502)
    expect(failed.body).not.toContain(upstreamKey)
    await gw.app.inject({ url: '/v1/models', headers: { authorization: 'Bearer sk-wrong-key-zzzzzzzz' } })

    const all = lines.join('')
    expect(lines.length).toBeGreaterThan(3)
    expect(all).toContain(ok.headers['x-request-id'] as string)
    expect(all).not.toContain(clientKey)
    expect(all).not.toContain(upstreamKey)
    expect(all).not.toContain('sk-wrong-key-zzzzzzzz')
    expect(all.toLowerCase()).not.toContain('bearer')
  })

  it('log a 503 shutting_down at info, without a stack trace', async () => {
    const before = lines.length
    gw.deps.lifecycle.draining = true
    try {
      const res = await gw.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: { authorization: `Bearer ${clientKey}` },
        payload: { model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }] },
      })
      expect(res.statusCode).toBe(503)
      expect(res.json().error.code).toBe('shutting_down')
    } finally {
      gw.deps.lifecycle.draining = false
    }
    const written = lines.slice(before).map((l) => JSON.parse(l) as Record<string, unknown>)
    const refusal = written.find((l) => l.code === 'shutting_down')
    expect(refusal).toMatchObject({ level: 30, status: 503, code: 'shutting_down' })
    expect(written.some((l) => (l.level as number) >= 50)).toBe(false)
    expect(JSON.stringify(written)).not.toContain('stack')
  })
})
