import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { afterAll, describe, expect, it } from 'vitest'
import { GatewayError } from '../../../src/errors.ts'
import { createLocalFileStorage } from '../../../src/files/local-storage.ts'
import { uploadFile, type UploadPart, type UploadRequest } from '../../../src/files/upload.ts'
import { createLogger } from '../../../src/logger.ts'
import { createMemoryFileStore } from '../../../src/store/memory/files.ts'

// The upload saga as a unit, without HTTP: parts in, a file record (or a GatewayError) out, and
// nothing kept when it fails: no bytes in storage, no record, the quota slot free again.

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

function setup(limits = { maxFileBytes: 100, maxFilesPerAccount: 2, maxBytesPerAccount: 1_000 }) {
  const dir = mkdtempSync(join(tmpdir(), 'junction-upload-'))
  dirs.push(dir)
  const files = createMemoryFileStore()
  const storage = createLocalFileStorage(dir)
  const deps = { files, storage, limits, now: () => 1_700_000_000_000, log: createLogger('silent') }
  return { files, storage, deps }
}

const filePart = (bytes: Buffer, filename = 'notes.txt', fieldname = 'file'): UploadPart => ({
  type: 'file',
  fieldname,
  filename,
  mimetype: 'text/plain',
  file: Object.assign(Readable.from([bytes]), { truncated: false }),
})

const field = (fieldname: string, value: string): UploadPart => ({
  type: 'field',
  fieldname,
  value,
  fieldnameTruncated: false,
  valueTruncated: false,
})

/** A request whose body is `parts`; records the file limit it was opened with and whether it was drained. */
function request(parts: UploadPart[] | (() => AsyncIterable<UploadPart>)) {
  const seen = { fileSize: undefined as number | undefined, drained: false }
  const r: UploadRequest = {
    accountId: 'acct-1',
    parts(fileSize) {
      seen.fileSize = fileSize
      if (typeof parts === 'function') return parts()
      return (async function* () {
        yield* parts
      })()
    },
    drain() {
      seen.drained = true
    },
  }
  return { r, seen }
}

async function refusal(p: Promise<unknown>): Promise<GatewayError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(GatewayError)
  return err as GatewayError
}

describe('uploadFile', () => {
  it('stores the file part and records it, purpose before or after the file', async () => {
    const s = setup()
    const body = Buffer.from('hello, file')
    const { r, seen } = request([filePart(body), field('purpose', 'assistants'), field('ignored', 'x')])
    const file = await uploadFile(s.deps, r)
    expect(file).toMatchObject({
      accountId: 'acct-1',
      bytes: body.length,
      filename: 'notes.txt',
      purpose: 'assistants',
      createdAt: 1_700_000_000_000,
    })
    expect(file.id).toMatch(/^file-/)
    expect(await s.storage.read(file.storageKey)).toEqual(body)
    expect(await s.files.get('acct-1', file.id)).toEqual(file)
    // The parser was allowed one byte over the limit: storage's counter is what refuses.
    expect(seen.fileSize).toBe(101)
    expect(seen.drained).toBe(false)

    const second = await uploadFile(s.deps, request([field('purpose', 'vision'), filePart(body)]).r)
    expect(second.purpose).toBe('vision')
  })

  it('a file over the limit is 413 and leaves nothing: no bytes, no record, the slot free', async () => {
    const s = setup({ maxFileBytes: 10, maxFilesPerAccount: 1, maxBytesPerAccount: 1_000 })
    const { r, seen } = request([field('purpose', 'assistants'), filePart(Buffer.alloc(11))])
    const e = await refusal(uploadFile(s.deps, r))
    expect(e.code).toBe('payload_too_large')
    expect(e.param).toBe('file')
    expect(seen.drained).toBe(true)
    expect(await s.storage.list()).toEqual([])
    expect((await s.files.list('acct-1', { order: 'desc', limit: 10 })).files).toEqual([])
    // The account's one slot was released: the next upload gets it.
    expect(
      await uploadFile(s.deps, request([field('purpose', 'assistants'), filePart(Buffer.alloc(10))]).r),
    ).toBeTruthy()
  })

  it('a bad purpose after the file removes the stored bytes', async () => {
    const s = setup()
    const e = await refusal(
      uploadFile(s.deps, request([filePart(Buffer.from('abc')), field('purpose', 'nonsense')]).r),
    )
    expect(e).toMatchObject({ code: 'invalid_value', param: 'purpose' })
    expect(await s.storage.list()).toEqual([])
  })

  it('refuses a missing file or purpose and a file in the wrong part', async () => {
    const s = setup()
    expect(await refusal(uploadFile(s.deps, request([field('purpose', 'assistants')]).r))).toMatchObject({
      code: 'missing_field',
      param: 'file',
    })
    expect(await refusal(uploadFile(s.deps, request([filePart(Buffer.from('a'))]).r))).toMatchObject({
      code: 'missing_field',
      param: 'purpose',
    })
    expect(
      await refusal(
        uploadFile(
          s.deps,
          request([field('purpose', 'assistants'), filePart(Buffer.from('a'), 'a.txt', 'other')]).r,
        ),
      ),
    ).toMatchObject({ code: 'invalid_value', param: 'file' })
    expect(await s.storage.list()).toEqual([])
  })

  it('an account at its file count is refused before the body is read', async () => {
    const s = setup({ maxFileBytes: 100, maxFilesPerAccount: 1, maxBytesPerAccount: 1_000 })
    await uploadFile(s.deps, request([field('purpose', 'assistants'), filePart(Buffer.from('a'))]).r)
    const { r, seen } = request([field('purpose', 'assistants'), filePart(Buffer.from('b'))])
    expect((await refusal(uploadFile(s.deps, r))).code).toBe('file_limit_exceeded')
    expect(seen.fileSize).toBeUndefined()
    expect(seen.drained).toBe(true)
  })

  it("the parser's limit errors become 400s, and the stored part is removed", async () => {
    const s = setup()
    const { r } = request(async function* () {
      yield filePart(Buffer.from('abc'))
      throw Object.assign(new Error('reach parts limit'), { code: 'FST_PARTS_LIMIT' })
    })
    const e = await refusal(uploadFile(s.deps, r))
    expect(e.code).toBe('invalid_value')
    expect(e.message).toContain('too many form fields')
    expect(await s.storage.list()).toEqual([])
  })
})
