import { afterEach, describe, expect, it } from 'vitest'
import { createMemoryStore } from '../../src/store/memory/index.ts'
import { postJson, startGateway, type TestGateway } from '../support/gateway.ts'

// No answer leaves without its charge: when the store cannot commit a charge (after its retries),
// a blocking answer is withheld (503) and a stream ends with an error event instead of [DONE].

let gw: TestGateway | undefined
afterEach(async () => {
  await gw?.close()
  gw = undefined
})

async function gatewayWhoseLedgerFails(): Promise<TestGateway> {
  const store = createMemoryStore()
  store.ledger.settle = async () => {
    throw new Error('database is down')
  }
  gw = await startGateway({ listen: true, env: { GATEWAY_ADMIN_KEY: ADMIN }, overrides: { store } })
  return gw
}

const ADMIN = 'admin-key-store-failure-01'

async function scrape(g: TestGateway, name: string): Promise<number | undefined> {
  const res = await g.app.inject({ url: '/metrics', headers: { authorization: `Bearer ${ADMIN}` } })
  const line = res.body.split('\n').find((l) => l.startsWith(`${name} `))
  return line === undefined ? undefined : Number(line.split(' ')[1])
}

const hello = { model: 'mock/chat', messages: [{ role: 'user', content: 'hello' }] }

describe('a charge that cannot be committed', () => {
  it('withholds a blocking answer: 503 store_unavailable, and counts the failure', async () => {
    const g = await gatewayWhoseLedgerFails()
    const res = await postJson(g, '/v1/chat/completions', hello)
    expect(res.status).toBe(503)
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('store_unavailable')
    expect(g.deps.stats.settleFailures).toBe(1)
    // An operator alerts on it: one failed charge after three retries.
    expect(await scrape(g, 'junction_settle_failures_total')).toBe(1)
    expect(await scrape(g, 'junction_settle_retries_total')).toBe(3)
  })

  it('ends a stream with an error event instead of [DONE]', async () => {
    const g = await gatewayWhoseLedgerFails()
    const res = await postJson(g, '/v1/chat/completions', { ...hello, stream: true })
    expect(res.status).toBe(200)
    const text = await res.text()
    expect(text).not.toContain('[DONE]')
    const last = text.trim().split('\n\n').at(-1) ?? ''
    expect(last).toContain('"code":"store_unavailable"')
    expect(g.deps.stats.settleFailures).toBe(1)
  })

  it('withholds embeddings the same way', async () => {
    const g = await gatewayWhoseLedgerFails()
    const res = await postJson(g, '/v1/embeddings', { model: 'mock/embed', input: 'hi' })
    expect(res.status).toBe(503)
  })
})
