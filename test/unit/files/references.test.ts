import { Readable } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { GatewayError } from '../../../src/errors.ts'
import { resolveFileReferences, type FileReferenceContext } from '../../../src/files/references.ts'
import { StorageObjectNotFoundError, type FileStorage } from '../../../src/files/storage.ts'
import type { ChatRequest } from '../../../src/providers/types.ts'
import { createMemoryFileStore } from '../../../src/store/memory/files.ts'
import { type FileStore, type StoredFile } from '../../../src/store/types.ts'

const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 1, 2, 3])

/** An in-memory FileStorage holding fixed objects; counts reads. */
function memoryStorage(objects: Record<string, Buffer>): FileStorage & { reads: string[] } {
  const reads: string[] = []
  return {
    reads,
    async write() {
      throw new Error('not used')
    },
    async open(key) {
      const b = objects[key]
      if (!b) throw new StorageObjectNotFoundError(key)
      return { stream: Readable.from([b]), bytes: b.length }
    },
    async read(key) {
      reads.push(key)
      const b = objects[key]
      if (!b) throw new StorageObjectNotFoundError(key)
      return b
    },
    async remove() {},
    async list() {
      return Object.keys(objects).map((key) => ({ key, modifiedAt: 0 }))
    },
    async sweepTemps() {
      return 0
    },
  }
}

async function seed(store: FileStore, file: Omit<StoredFile, 'createdAt' | 'purpose'>): Promise<void> {
  const quota = { maxFiles: 100, maxBytes: 1e9 }
  const r = await store.reserve(file.accountId, quota, 0, 60_000)
  if (!r.ok) throw new Error('reserve')
  await store.commit(r.token, { ...file, createdAt: 0, purpose: 'user_data' }, quota, 0)
}

async function setup(
  maxInlineBytes = 1_000_000,
): Promise<FileReferenceContext & { storage: { reads: string[] } }> {
  const files = createMemoryFileStore()
  const storage = memoryStorage({
    k1: Buffer.from('%PDF-1.4 tiny'),
    k2: PNG,
    k3: PNG,
    k4: Buffer.from('plain text'),
    gone: Buffer.alloc(0),
  })
  const pdf = Buffer.from('%PDF-1.4 tiny')
  await seed(files, {
    id: 'file-pdf',
    accountId: 'alice',
    bytes: pdf.length,
    filename: 'report.pdf',
    contentType: 'application/pdf',
    storageKey: 'k1',
  })
  await seed(files, {
    id: 'file-png',
    accountId: 'alice',
    bytes: PNG.length,
    filename: 'cat.png',
    contentType: 'image/png',
    storageKey: 'k2',
  })
  // Uploaded without a useful type: the image is recognised by its bytes.
  await seed(files, {
    id: 'file-untyped',
    accountId: 'alice',
    bytes: PNG.length,
    filename: 'blob',
    contentType: 'application/octet-stream',
    storageKey: 'k3',
  })
  await seed(files, {
    id: 'file-text',
    accountId: 'alice',
    bytes: 10,
    filename: 'a.txt',
    contentType: 'text/plain',
    storageKey: 'k4',
  })
  await seed(files, {
    id: 'file-bobs',
    accountId: 'bob',
    bytes: 10,
    filename: 'b.txt',
    contentType: 'text/plain',
    storageKey: 'k4',
  })
  await seed(files, {
    id: 'file-nobytes',
    accountId: 'alice',
    bytes: 1,
    filename: 'x',
    contentType: 'text/plain',
    storageKey: 'missing',
  })
  return { accountId: 'alice', files, storage, maxInlineBytes }
}

const request = (messages: ChatRequest['messages']): ChatRequest => ({
  model: 'openai/gpt-4o-mini',
  messages,
  temperature: 0,
})

async function rejection(p: Promise<unknown>): Promise<GatewayError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(GatewayError)
  return err as GatewayError
}

describe('resolveFileReferences', () => {
  it('returns the very same request when nothing refers to a file', async () => {
    const ctx = await setup()
    const req = request([
      { role: 'system', content: 'be brief' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'hi' },
          { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } },
          { type: 'file', file: { file_data: 'data:application/pdf;base64,AAAA', filename: 'x.pdf' } },
        ],
      },
    ])
    expect(await resolveFileReferences(req, ctx)).toBe(req)
  })

  it('inlines a file part as a data URL with the stored type and name, and leaves the input untouched', async () => {
    const ctx = await setup()
    const req = request([
      { role: 'system', content: 'be brief' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Summarize' },
          { type: 'file', file: { file_id: 'file-pdf' } },
        ],
      },
    ])
    const before = structuredClone(req)
    const out = await resolveFileReferences(req, ctx)
    expect(req).toEqual(before)
    expect(out.temperature).toBe(0)
    expect(out.messages[0]).toBe(req.messages[0])
    expect(out.messages[1]!.content).toEqual([
      { type: 'text', text: 'Summarize' },
      {
        type: 'file',
        file: {
          filename: 'report.pdf',
          file_data: `data:application/pdf;base64,${Buffer.from('%PDF-1.4 tiny').toString('base64')}`,
        },
      },
    ])
  })

  it("keeps the caller's filename and other fields of the part", async () => {
    const ctx = await setup()
    const out = await resolveFileReferences(
      request([
        {
          role: 'user',
          content: [
            {
              type: 'file',
              file: { file_id: 'file-text', filename: 'notes.txt' },
              cache_control: { type: 'ephemeral' },
            },
          ],
        },
      ]),
      ctx,
    )
    expect(out.messages[0]!.content).toEqual([
      {
        type: 'file',
        file: {
          filename: 'notes.txt',
          file_data: `data:text/plain;base64,${Buffer.from('plain text').toString('base64')}`,
        },
        cache_control: { type: 'ephemeral' },
      },
    ])
  })

  it('turns an image_url that is a file id into an image data URL, keeping detail; sniffs untyped images', async () => {
    const ctx = await setup()
    const out = await resolveFileReferences(
      request([
        {
          role: 'user',
          content: [
            { type: 'image_url', image_url: { url: 'file-png', detail: 'low' } },
            { type: 'image_url', image_url: { url: 'file-untyped' } },
          ],
        },
      ]),
      ctx,
    )
    const b64 = PNG.toString('base64')
    expect(out.messages[0]!.content).toEqual([
      { type: 'image_url', image_url: { url: `data:image/png;base64,${b64}`, detail: 'low' } },
      { type: 'image_url', image_url: { url: `data:image/png;base64,${b64}` } },
    ])
  })

  it('reads a file referenced twice only once', async () => {
    const ctx = await setup()
    const out = await resolveFileReferences(
      request([
        { role: 'user', content: [{ type: 'file', file: { file_id: 'file-pdf' } }] },
        { role: 'assistant', content: 'ok' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'again' },
            { type: 'file', file: { file_id: 'file-pdf' } },
          ],
        },
      ]),
      ctx,
    )
    expect(ctx.storage.reads).toEqual(['k1'])
    expect(JSON.stringify(out.messages[0])).toContain('data:application/pdf;base64,')
    expect(JSON.stringify(out.messages[2])).toContain('data:application/pdf;base64,')
  })

  it("answers 400 naming the part for an unknown id and for another account's", async () => {
    const ctx = await setup()
    const unknown = await rejection(
      resolveFileReferences(
        request([
          { role: 'system', content: 'x' },
          { role: 'user', content: [{ type: 'file', file: { file_id: 'file-nope' } }] },
        ]),
        ctx,
      ),
    )
    expect(unknown).toMatchObject({
      status: 400,
      code: 'invalid_value',
      param: 'messages[1].content[0].file.file_id',
    })
    expect(unknown.message).toContain('file-nope')

    const foreign = await rejection(
      resolveFileReferences(
        request([{ role: 'user', content: [{ type: 'file', file: { file_id: 'file-bobs' } }] }]),
        ctx,
      ),
    )
    expect(foreign).toMatchObject({ status: 400, param: 'messages[0].content[0].file.file_id' })

    const image = await rejection(
      resolveFileReferences(
        request([
          {
            role: 'user',
            content: [
              { type: 'text', text: 'a' },
              { type: 'image_url', image_url: { url: 'file-bobs' } },
            ],
          },
        ]),
        ctx,
      ),
    )
    expect(image).toMatchObject({ status: 400, param: 'messages[0].content[1].image_url.url' })
  })

  it('answers 400 for an image reference to a file that is not an image', async () => {
    const ctx = await setup()
    const err = await rejection(
      resolveFileReferences(
        request([{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'file-text' } }] }]),
        ctx,
      ),
    )
    expect(err).toMatchObject({
      status: 400,
      code: 'invalid_value',
      param: 'messages[0].content[0].image_url.url',
    })
    expect(err.message).toContain('not an image')
  })

  it('treats a file whose bytes are gone (deleted meanwhile) as unknown', async () => {
    const ctx = await setup()
    const err = await rejection(
      resolveFileReferences(
        request([{ role: 'user', content: [{ type: 'file', file: { file_id: 'file-nobytes' } }] }]),
        ctx,
      ),
    )
    expect(err).toMatchObject({ status: 400, param: 'messages[0].content[0].file.file_id' })
  })

  it('caps the bytes inlined into one request, counting every reference, before reading any', async () => {
    const ctx = await setup(PNG.length * 2)
    const twice = request([
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: 'file-png' } },
          { type: 'image_url', image_url: { url: 'file-png' } },
        ],
      },
    ])
    await expect(resolveFileReferences(twice, ctx)).resolves.toBeDefined()
    const thrice = request([
      {
        role: 'user',
        content: [
          ...(twice.messages[0]!.content as object[]),
          { type: 'image_url', image_url: { url: 'file-png' } },
        ] as never,
      },
    ])
    ctx.storage.reads.length = 0
    const err = await rejection(resolveFileReferences(thrice, ctx))
    expect(err).toMatchObject({
      status: 413,
      code: 'payload_too_large',
      param: 'messages[0].content[2].image_url.url',
    })
    expect(ctx.storage.reads).toEqual([])
  })
})
