import { afterEach, describe, expect, it } from 'vitest'
import { startChat } from '../../../src/inference/chat.ts'
import { parseChatRequest } from '../../../src/schemas/chat.ts'
import type { Account } from '../../../src/domain/accounts.ts'
import type { GenerationRecord } from '../../../src/domain/records.ts'
import { startGateway, type TestGateway } from '../../support/gateway.ts'

let gw: TestGateway | undefined
afterEach(async () => {
  await gw?.close()
  gw = undefined
})

describe('startChat, streamed', () => {
  it('a client that leaves before the first chunk is read is still settled, and its hold released', async () => {
    gw = await startGateway()
    const { deps } = gw
    const account = (await deps.store.accounts.get('dev')) as Account
    const client = new AbortController()
    // Settled once the estimate is counted (in the tokenizer's thread): the record callback says when.
    let recorded!: (r: GenerationRecord | null) => void
    const settled = new Promise<GenerationRecord | null>((resolve) => (recorded = resolve))
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
      onRecord: (r) => recorded(r),
    })
    expect(started.stream).toBe(true)
    expect(deps.renewals.size()).toBe(1)
    // The client goes away while the headers are being written: nobody ever reads the chunks.
    client.abort()
    expect(await settled).not.toBeNull()
    const record = (await deps.store.generations.get(started.generationId)) as GenerationRecord
    expect(record).toMatchObject({ cancelled: true, costSource: 'estimate', streamed: true })
    expect(record.usage.prompt_tokens).toBeGreaterThan(0)
    expect(deps.renewals.size()).toBe(0)
    expect((await deps.store.ledger.credits('dev', deps.now())).reserved).toBe(0n)
    // Reading afterwards yields nothing and settles nothing twice.
    if (started.stream) for await (const _ of started.batches) throw new Error('no chunk expected')
    expect((await deps.store.ledger.credits('dev', deps.now())).totalUsage).toBe(record.cost)
  })
})
