import type { Readable } from 'node:stream'
import { afterEach, describe, expect, it } from 'vitest'
import type { FileStorage } from '../../src/files/storage.ts'
import { UPLOAD_RESERVATION_TTL_MS } from '../../src/files/upload.ts'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// An upload holds a file slot only for UPLOAD_RESERVATION_TTL_MS: one that outlives it is refused with
// 408 and keeps nothing, and its slot is not counted twice. The clock is the gateway's `now`, which the
// storage moves forward while it receives the bytes (the upload "takes" as long as the test says).

const BOUNDARY = '----junction-expiry-test'

function uploadBody(name: string): Buffer {
  return Buffer.from(
    `--${BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n` +
      `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="${name}"\r\n` +
      `Content-Type: text/plain\r\n\r\nhello\r\n--${BOUNDARY}--\r\n`,
  )
}

/** Bytes in memory; each write takes `writeTakesMs` of the fake clock. */
function memoryStorage(clock: { t: number; writeTakesMs: number }) {
  const objects = new Map<string, Buffer>()
  let n = 0
  const storage: FileStorage = {
    async write(source: Readable) {
      const chunks: Buffer[] = []
      for await (const c of source) chunks.push(c as Buffer)
      clock.t += clock.writeTakesMs
      const key = `obj${++n}`
      objects.set(key, Buffer.concat(chunks))
      return { key, bytes: objects.get(key)!.length }
    },
    async open() {
      throw new Error('not used')
    },
    async read(key) {
      return objects.get(key)!
    },
    async remove(key) {
      objects.delete(key)
    },
    async list() {
      return [...objects.keys()].map((key) => ({ key, modifiedAt: clock.t }))
    },
    async sweepTemps() {
      return 0
    },
  }
  return { storage, objects }
}

let gw: TestGateway | undefined
afterEach(async () => {
  await gw?.close()
  gw = undefined
})

describe('file upload reservations', () => {
  it('refuses an upload that outlived its hold with 408, keeping nothing and freeing its slot once', async () => {
    const clock = { t: 1_000_000, writeTakesMs: UPLOAD_RESERVATION_TTL_MS }
    const { storage, objects } = memoryStorage(clock)
    gw = await startGateway({
      env: { GATEWAY_MAX_FILES_PER_ACCOUNT: '1' },
      overrides: { now: () => clock.t, fileStorage: storage },
    })
    const post = (name: string) =>
      gw!.app.inject({
        method: 'POST',
        url: '/v1/files',
        headers: { ...devAuth, 'content-type': `multipart/form-data; boundary=${BOUNDARY}` },
        payload: uploadBody(name),
      })

    const late = await post('late.txt')
    expect(late.statusCode).toBe(408)
    expect(late.json().error).toMatchObject({ code: 'request_timeout', type: 'invalid_request_error' })
    expect(objects.size).toBe(0)
    expect(await gw.deps.store.files.usage('dev')).toEqual({ files: 0, bytes: 0 })

    // The one slot is free again: a prompt upload takes it, and then the account is full.
    clock.writeTakesMs = 1000
    expect((await post('prompt.txt')).statusCode).toBe(200)
    const full = await post('third.txt')
    expect(full.statusCode).toBe(400)
    expect(full.json().error.code).toBe('file_limit_exceeded')
    expect(await gw.deps.store.files.usage('dev')).toEqual({ files: 1, bytes: 5 })
    expect(objects.size).toBe(1)
  })
})
