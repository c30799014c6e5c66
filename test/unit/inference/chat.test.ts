import { afterEach, describe, expect, it } from 'vitest'
import { startChat } from '../../../src/inference/chat.ts'
import { parseChatRequest } from '../../../src/schemas/chat.ts'
import type { Account, GenerationRecord } from '../../../src/store/types.ts'
import { startGateway, type TestGateway } from '../../support/gateway.ts'

let gw: TestGateway | undefined
afterEach(async () => {
  await gw?.close()
  gw = undefined
})

async function recordOf(g: TestGateway, id: string): Promise<GenerationRecord> {
  // Settling runs on the abort's own turn and the estimate's; a bounded number of turns is plenty.
  for (let i = 0; i < 500; i++) {
    const r = await g.deps.store.generations.get(id)
    if (r) return r
    await new Promise((resolve) => setImmediate(resolve))
  }
  throw new Error(`no record ${id}`)
}

describe('startChat, streamed', () => {
  it('a client that leaves before the first chunk is read is still settled, and its hold released', async () => {
    gw = await startGateway()
    const { deps } = gw
    const account = (await deps.store.accounts.get('dev')) as Account
    const client = new AbortController()
    const started = await startChat(deps, {
      account,
      req: parseChatRequest({
        model: 'mock/chat',
        messages: [{ role: 'user', content: 'hello' }],
        stream: true,
      }),
      api: '/v1/chat/completions',
      signal: client.signal,
      log: deps.log,
    })
    expect(started.stream).toBe(true)
    expect(deps.renewals.size()).toBe(1)
    // The client goes away while the headers are being written: nobody ever reads the chunks.
    client.abort()
    const record = await recordOf(gw, started.generationId)
    expect(record).toMatchObject({ cancelled: true, costSource: 'estimate', streamed: true })
    expect(record.usage.prompt_tokens).toBeGreaterThan(0)
    expect(deps.renewals.size()).toBe(0)
    expect((await deps.store.ledger.credits('dev', deps.now())).reserved).toBe(0n)
    // Reading afterwards yields nothing and settles nothing twice.
    if (started.stream) for await (const _ of started.batches) throw new Error('no chunk expected')
    expect((await deps.store.ledger.credits('dev', deps.now())).totalUsage).toBe(record.cost)
  })
})
