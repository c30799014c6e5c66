import { randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { createLogger } from '../../src/logger.ts'
import { startGateway, type TestGateway } from '../support/gateway.ts'

// A download read whole is a 200 in the request's log line and metrics, even when the client closes
// the moment its last byte arrives (as curl does): the file's stream ends with its last byte, not
// after one more read that finds the end, so the answer is ended before such a client can close.

const key = 'sk-download-key-0123456789'

describe('a whole download', () => {
  let gw: TestGateway
  let dir: string
  const lines: string[] = []
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'junction-download-'))
    const sink = new Writable({
      write(chunk, _enc, cb) {
        lines.push(String(chunk))
        cb()
      },
    })
    gw = await startGateway({
      env: { GATEWAY_FILES_DIR: join(dir, 'files'), GATEWAY_OUTPUTS_DIR: join(dir, 'outputs') },
      file: { accounts: [{ id: 'acme', keys: [key], credits: 10 }] },
      overrides: { log: createLogger('info', sink) },
      listen: true,
    })
  })
  afterAll(async () => {
    await gw.close()
    await rm(dir, { recursive: true, force: true })
  })

  /** GETs the content over a raw socket and destroys it as soon as the last body byte is in. */
  function readWholeThenClose(path: string): Promise<number> {
    const { hostname, port } = new URL(gw.origin)
    return new Promise((resolve, reject) => {
      const socket = connect({ host: hostname, port: Number(port) })
      let got = Buffer.alloc(0)
      socket.on('error', reject)
      socket.on('data', (d: Buffer) => {
        got = Buffer.concat([got, d])
        const headEnd = got.indexOf('\r\n\r\n')
        if (headEnd === -1) return
        const length = Number(/content-length: (\d+)/i.exec(got.subarray(0, headEnd).toString())?.[1])
        if (got.length - headEnd - 4 >= length) {
          socket.destroy()
          resolve(got.length - headEnd - 4)
        }
      })
      socket.write(`GET ${path} HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer ${key}\r\n\r\n`)
    })
  }

  it('is logged 200, not 499, when the client closes on its last byte', async () => {
    const bytes = randomBytes(300_000)
    const form = new FormData()
    form.append('purpose', 'user_data')
    form.append('file', new Blob([bytes]), 'blob.bin')
    const res = await fetch(`${gw.origin}/v1/files`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
      body: form,
    })
    expect(res.status).toBe(200)
    const { id } = (await res.json()) as { id: string }

    const downloads = 20
    for (let i = 0; i < downloads; i++) {
      expect(await readWholeThenClose(`/v1/files/${id}/content`)).toBe(bytes.length)
    }
    const statuses = () =>
      lines
        .map((l) => JSON.parse(l) as { route?: string; status?: number; msg?: string })
        .filter((l) => l.msg === 'request' && l.route === '/v1/files/:id/content')
        .map((l) => l.status)
    // Log lines are written in batches: wait for all of them.
    await vi.waitFor(() => expect(statuses()).toHaveLength(downloads))
    expect(statuses()).toEqual(Array.from({ length: downloads }, () => 200))
  })
})
