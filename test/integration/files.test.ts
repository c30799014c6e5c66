import { execFile } from 'node:child_process'
import { createReadStream } from 'node:fs'
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import { request as httpRequest } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import OpenAI, { toFile } from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { sendJson, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.ts'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// The files API against the listening gateway: the official OpenAI SDK, curl, and hand-made multipart
// bodies for the error cases; chat requests that reference uploads reach a fake OpenAI-compatible
// upstream with the files' content inline.

const UPSTREAM_KEY = 'sk-test-upstream-secret-123456'
const PNG = Buffer.concat([
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
  Buffer.from('0000000dIHDR-not-really-a-png-but-close-enough'),
])
const PDF = Buffer.from('%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n')

const completion = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1_700_000_000,
  model: 'gpt-4o-mini',
  choices: [
    {
      index: 0,
      message: { role: 'assistant', content: 'It is a PDF.' },
      finish_reason: 'stop',
      logprobs: null,
    },
  ],
  usage: { prompt_tokens: 30, completion_tokens: 5, total_tokens: 35 },
}

interface RawResponse {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: string
}

/** One request with a body given as chunks, on its own connection. */
function rawRequest(
  origin: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body: Iterable<Buffer | string> | AsyncIterable<Buffer | string> = [],
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${origin}${path}`, { method, headers, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: Buffer.concat(chunks).toString(),
        }),
      )
      res.on('error', reject)
    })
    req.on('error', reject)
    void (async () => {
      try {
        for await (const chunk of body) {
          if (!req.write(chunk)) await new Promise((r) => req.once('drain', r))
        }
        req.end()
      } catch (err) {
        req.destroy(err as Error)
      }
    })()
  })
}

const BOUNDARY = '----junction-test-boundary'
type FormPart =
  { name: string; value: string } | { name: string; filename: string; type?: string; data: Buffer }

function multipartBody(parts: FormPart[], { close = true } = {}): Buffer {
  const out: Buffer[] = []
  for (const p of parts) {
    let head = `--${BOUNDARY}\r\nContent-Disposition: form-data; name="${p.name}"`
    if ('filename' in p)
      head += `; filename="${p.filename}"\r\nContent-Type: ${p.type ?? 'application/octet-stream'}`
    out.push(Buffer.from(`${head}\r\n\r\n`), 'data' in p ? p.data : Buffer.from(p.value), Buffer.from('\r\n'))
  }
  if (close) out.push(Buffer.from(`--${BOUNDARY}--\r\n`))
  return Buffer.concat(out)
}

const multipartHeaders = { ...devAuth, 'content-type': `multipart/form-data; boundary=${BOUNDARY}` }

async function upload(origin: string, parts: FormPart[], headers = multipartHeaders): Promise<RawResponse> {
  return rawRequest(origin, 'POST', '/v1/files', headers, [multipartBody(parts)])
}

const json = (
  r: RawResponse,
): { error: { code: string; param: string | null; message: string; type: string } } => JSON.parse(r.body)

async function objectsIn(dir: string): Promise<string[]> {
  return readdir(dir).catch(() => [])
}

describe('files with the OpenAI SDK, curl and chat references', () => {
  let dir: string
  let fake: FakeUpstream
  let gw: TestGateway
  let client: OpenAI

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'junction-files-'))
    fake = await startFakeUpstream({
      'POST /v1/chat/completions': (_req, res) => sendJson(res, 200, completion),
    })
    gw = await startGateway({
      env: { GATEWAY_FILES_DIR: dir, OPENAI_API_KEY: UPSTREAM_KEY, OPENAI_BASE_URL: `${fake.origin}/v1` },
      listen: true,
    })
    client = new OpenAI({ baseURL: `${gw.origin}/v1`, apiKey: 'sk-dev', maxRetries: 0 })
  })

  afterAll(async () => {
    await fake?.close()
    await gw?.close()
    await rm(dir, { recursive: true, force: true })
  })

  it('creates, lists, retrieves, downloads and deletes a file with the SDK', async () => {
    const created = await client.files.create({
      purpose: 'assistants',
      file: await toFile(PDF, 'report.pdf'),
    })
    expect(created).toMatchObject({
      object: 'file',
      bytes: PDF.length,
      filename: 'report.pdf',
      purpose: 'assistants',
      status: 'processed',
    })
    expect(created.id).toMatch(/^file-[A-Za-z0-9_-]{24,}$/)
    expect(Math.abs(created.created_at - Date.now() / 1000)).toBeLessThan(60)

    // The file part first this time, and a stream from disk (the SDK streams it).
    const onDisk = join(dir, '..', `junction-upload-${process.pid}.txt`)
    await writeFile(onDisk, 'line one\nline two\n')
    const second = await client.files.create({ file: createReadStream(onDisk), purpose: 'user_data' })
    await rm(onDisk)
    expect(second).toMatchObject({
      bytes: 18,
      purpose: 'user_data',
      filename: `junction-upload-${process.pid}.txt`,
    })

    const all: string[] = []
    for await (const f of client.files.list()) all.push(f.id)
    expect(all).toEqual([second.id, created.id])
    const assistants = await client.files.list({ purpose: 'assistants' })
    expect(assistants.data.map((f) => f.id)).toEqual([created.id])

    expect(await client.files.retrieve(created.id)).toEqual(created)

    const content = await client.files.content(created.id)
    expect(content.headers.get('content-type')).toBe('application/pdf')
    expect(content.headers.get('content-length')).toBe(String(PDF.length))
    expect(Buffer.from(await content.arrayBuffer())).toEqual(PDF)

    // Two stored objects, named by random keys, never by the file names.
    const objects = await objectsIn(dir)
    expect(objects).toHaveLength(2)
    for (const name of objects) expect(name).toMatch(/^[0-9a-f]{32}$/)

    expect(await client.files.delete(created.id)).toEqual({ id: created.id, object: 'file', deleted: true })
    expect(await objectsIn(dir)).toHaveLength(1)
    const gone = await client.files.retrieve(created.id).catch((e: unknown) => e)
    expect(gone).toBeInstanceOf(OpenAI.NotFoundError)
    expect((gone as InstanceType<typeof OpenAI.NotFoundError>).code).toBe('file_not_found')
    await expect(client.files.content(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError)
    await expect(client.files.delete(created.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError)

    await client.files.delete(second.id)
    expect(await objectsIn(dir)).toEqual([])
  })

  it('pages the list newest first for SDK auto-pagination', async () => {
    const ids: string[] = []
    for (let i = 0; i < 5; i++) {
      const f = await client.files.create({
        purpose: 'batch',
        file: await toFile(Buffer.from(`{"n":${i}}\n`), `b${i}.jsonl`),
      })
      ids.unshift(f.id)
    }
    const page = await client.files.list({ limit: 2 })
    expect(page.data.map((f) => f.id)).toEqual(ids.slice(0, 2))
    expect(page.has_more).toBe(true)
    const seen: string[] = []
    for await (const f of client.files.list({ limit: 2, purpose: 'batch' })) seen.push(f.id)
    expect(seen).toEqual(ids)
    const asc = await client.files.list({ order: 'asc', purpose: 'batch' })
    expect(asc.data.map((f) => f.id)).toEqual([...ids].reverse())
    for (const id of ids) await client.files.delete(id)
  })

  it('works with curl -F', async () => {
    const path = join(dir, '..', `junction-curl-${process.pid}.txt`)
    await writeFile(path, 'from curl\n')
    const run = promisify(execFile)
    const up = await run('curl', [
      '-sS',
      '-H',
      'Authorization: Bearer sk-dev',
      '-F',
      'purpose=user_data',
      '-F',
      `file=@${path}`,
      `${gw.origin}/v1/files`,
    ])
    await rm(path)
    const file = JSON.parse(up.stdout) as { id: string; bytes: number; filename: string }
    expect(file).toMatchObject({ bytes: 10, filename: `junction-curl-${process.pid}.txt` })
    const down = await run('curl', [
      '-sS',
      '-H',
      'Authorization: Bearer sk-dev',
      `${gw.origin}/v1/files/${file.id}/content`,
    ])
    expect(down.stdout).toBe('from curl\n')
    const del = await run('curl', [
      '-sS',
      '-X',
      'DELETE',
      '-H',
      'Authorization: Bearer sk-dev',
      `${gw.origin}/v1/files/${file.id}`,
    ])
    expect(JSON.parse(del.stdout)).toEqual({ id: file.id, object: 'file', deleted: true })
  })

  it('sends a referenced file and image to the upstream inline, blocking and streamed', async () => {
    const pdf = await client.files.create({
      purpose: 'user_data',
      file: await toFile(PDF, 'report.pdf', { type: 'application/pdf' }),
    })
    const png = await client.files.create({ purpose: 'vision', file: await toFile(PNG, 'cat.png') })
    fake.requests.length = 0

    const answer = await client.chat.completions.create({
      model: 'openai/gpt-4o-mini',
      messages: [
        { role: 'system', content: 'Be brief.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is in these?' },
            { type: 'file', file: { file_id: pdf.id } },
            { type: 'image_url', image_url: { url: png.id, detail: 'low' } },
          ],
        },
      ],
    })
    expect(answer.choices[0]!.message.content).toBe('It is a PDF.')
    const sent = fake.requests[0]!.body as { messages: { content: unknown }[] }
    expect(sent.messages[0]).toEqual({ role: 'system', content: 'Be brief.' })
    expect(sent.messages[1]!.content).toEqual([
      { type: 'text', text: 'What is in these?' },
      {
        type: 'file',
        file: { filename: 'report.pdf', file_data: `data:application/pdf;base64,${PDF.toString('base64')}` },
      },
      {
        type: 'image_url',
        image_url: { url: `data:image/png;base64,${PNG.toString('base64')}`, detail: 'low' },
      },
    ])
    expect(JSON.stringify(sent)).not.toContain(pdf.id)

    // The streaming path resolves the same way (the fake answers JSON: the SDK only has to send).
    fake.requests.length = 0
    await client.chat.completions
      .create({
        model: 'openai/gpt-4o-mini',
        stream: true,
        messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: pdf.id } }] }],
      })
      .catch(() => undefined)
    const streamed = fake.requests[0]!.body as { messages: { content: { file: { file_data: string } }[] }[] }
    expect(streamed.messages[0]!.content[0]!.file.file_data).toBe(
      `data:application/pdf;base64,${PDF.toString('base64')}`,
    )

    await client.files.delete(pdf.id)
    await client.files.delete(png.id)
  })

  it('answers 400 naming the message part for an unknown file id, without calling the upstream', async () => {
    fake.requests.length = 0
    const err = await client.chat.completions
      .create({
        model: 'openai/gpt-4o-mini',
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: 'hello' },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'see' },
              { type: 'file', file: { file_id: 'file-doesnotexist0000000000000' } },
            ],
          },
        ],
      })
      .catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    const e = err as InstanceType<typeof OpenAI.BadRequestError>
    expect(e.param).toBe('messages[2].content[1].file.file_id')
    expect(e.code).toBe('invalid_value')
    expect(fake.requests).toHaveLength(0)
  })

  it('accepts purpose after the file, and rejects a bad purpose without keeping the file', async () => {
    const ok = await upload(gw.origin, [
      { name: 'file', filename: 'late.txt', type: 'text/plain', data: Buffer.from('late purpose') },
      { name: 'purpose', value: 'user_data' },
    ])
    expect(ok.status).toBe(200)
    const { id } = JSON.parse(ok.body) as { id: string }
    await client.files.delete(id)

    const bad = await upload(gw.origin, [
      { name: 'file', filename: 'x.txt', data: Buffer.from('x') },
      { name: 'purpose', value: 'fine-tuning' },
    ])
    expect(bad.status).toBe(400)
    expect(json(bad).error).toMatchObject({
      code: 'invalid_value',
      param: 'purpose',
      type: 'invalid_request_error',
    })
    expect(json(bad).error.message).toContain('assistants, batch, fine-tune, vision, user_data')
    expect(await objectsIn(dir)).toEqual([])
  })

  it('answers bad multipart bodies with a clear 400 (or 415), keeping nothing', async () => {
    const file: FormPart = { name: 'file', filename: 'a.txt', data: Buffer.from('abc') }
    const purpose: FormPart = { name: 'purpose', value: 'user_data' }
    const cases: [string, Promise<RawResponse>, number, Partial<{ code: string; param: string | null }>][] = [
      ['no purpose', upload(gw.origin, [file]), 400, { code: 'missing_field', param: 'purpose' }],
      ['no file', upload(gw.origin, [purpose]), 400, { code: 'missing_field', param: 'file' }],
      [
        'file as a plain field',
        upload(gw.origin, [purpose, { name: 'file', value: 'abc' }]),
        400,
        { param: 'file' },
      ],
      [
        'file under another name',
        upload(gw.origin, [purpose, { ...file, name: 'upload' }]),
        400,
        { param: 'file' },
      ],
      [
        'two files',
        upload(gw.origin, [purpose, file, { ...file, filename: 'b.txt' }]),
        400,
        { param: 'file' },
      ],
      [
        'purpose too long',
        upload(gw.origin, [file, { name: 'purpose', value: 'x'.repeat(5000) }]),
        400,
        { param: 'purpose' },
      ],
      [
        'too many fields',
        upload(gw.origin, [
          purpose,
          ...Array.from({ length: 12 }, (_, i) => ({ name: `f${i}`, value: 'v' })),
          file,
        ]),
        400,
        { code: 'invalid_value' },
      ],
      [
        'body cut before the closing boundary',
        rawRequest(gw.origin, 'POST', '/v1/files', multipartHeaders, [
          multipartBody([purpose, file], { close: false }).subarray(0, -10),
        ]),
        400,
        { code: 'invalid_value' },
      ],
      [
        'no boundary',
        rawRequest(gw.origin, 'POST', '/v1/files', { ...devAuth, 'content-type': 'multipart/form-data' }, [
          'abc',
        ]),
        400,
        { code: 'invalid_value' },
      ],
      [
        'JSON instead of multipart',
        rawRequest(gw.origin, 'POST', '/v1/files', { ...devAuth, 'content-type': 'application/json' }, [
          '{"purpose":"user_data"}',
        ]),
        415,
        { code: 'unsupported_media_type' },
      ],
    ]
    for (const [name, pending, status, error] of cases) {
      const res = await pending
      expect({ name, status: res.status }).toEqual({ name, status })
      expect(json(res).error).toMatchObject(error)
      expect(json(res).error.message.length).toBeGreaterThan(10)
    }
    expect(await objectsIn(dir)).toEqual([])
    expect((await client.files.list()).data).toEqual([])
  })

  it('keeps nothing of an upload whose client hangs up half-way', async () => {
    const req = httpRequest(`${gw.origin}/v1/files`, {
      method: 'POST',
      headers: multipartHeaders,
      agent: false,
    })
    req.on('error', () => {})
    req.write(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n`)
    req.write(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="cut.bin"\r\n\r\n`)
    for (let i = 0; i < 8; i++) await new Promise((r) => req.write(Buffer.alloc(64 * 1024, 1), r))
    // The temp file exists while the upload runs...
    const deadline = Date.now() + 5000
    while ((await objectsIn(dir)).length === 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10))
    expect((await objectsIn(dir)).some((n) => n.startsWith('.tmp-'))).toBe(true)
    req.destroy()
    // ...and is gone once the gateway sees the connection close.
    while ((await objectsIn(dir)).length > 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10))
    expect(await objectsIn(dir)).toEqual([])
    expect((await client.files.list()).data).toEqual([])
  })

  it('validates the list query and answers 404 for unknown ids', async () => {
    const bad = await rawRequest(gw.origin, 'GET', '/v1/files?purpose=nope', devAuth)
    expect(bad.status).toBe(400)
    expect(json(bad).error).toMatchObject({ code: 'invalid_value', param: 'purpose' })
    const badLimit = await rawRequest(gw.origin, 'GET', '/v1/files?limit=0', devAuth)
    expect(json(badLimit).error).toMatchObject({ param: 'limit' })
    for (const [method, path] of [
      ['GET', '/v1/files/file-nope'],
      ['GET', '/v1/files/file-nope/content'],
      ['DELETE', '/v1/files/file-nope'],
    ] as const) {
      const res = await rawRequest(gw.origin, method, path, devAuth)
      expect(res.status).toBe(404)
      expect(json(res).error).toMatchObject({ type: 'not_found_error', code: 'file_not_found' })
    }
    const noKey = await rawRequest(gw.origin, 'GET', '/v1/files', {})
    expect(noKey.status).toBe(401)
  })
})

describe('file limits', () => {
  const MAX_FILE = 64 * 1024
  let dir: string
  let gw: TestGateway
  let client: OpenAI

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'junction-files-limits-'))
    gw = await startGateway({
      env: {
        GATEWAY_FILES_DIR: dir,
        GATEWAY_MAX_FILE_BYTES: String(MAX_FILE),
        GATEWAY_MAX_FILES_PER_ACCOUNT: '3',
        GATEWAY_MAX_FILE_BYTES_PER_ACCOUNT: String(150 * 1024),
        GATEWAY_MAX_INLINE_FILE_BYTES: String(100 * 1024),
      },
      listen: true,
    })
    client = new OpenAI({ baseURL: `${gw.origin}/v1`, apiKey: 'sk-dev', maxRetries: 0 })
  })

  afterAll(async () => {
    await gw?.close()
    await rm(dir, { recursive: true, force: true })
  })

  const deleteAll = async (): Promise<void> => {
    for (const f of (await client.files.list()).data) await client.files.delete(f.id)
  }

  it('answers 413 over the size limit, keeps nothing, and the connection stays usable', async () => {
    const exact = await client.files.create({
      purpose: 'user_data',
      file: await toFile(Buffer.alloc(MAX_FILE, 1), 'exact.bin'),
    })
    expect(exact.bytes).toBe(MAX_FILE)
    await client.files.delete(exact.id)

    // 4 MB sent as it is produced; the gateway answers as soon as the limit is passed.
    let produced = 0
    async function* big(): AsyncGenerator<Buffer> {
      yield Buffer.from(
        `--${BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n`,
      )
      yield Buffer.from(
        `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`,
      )
      for (let i = 0; i < 64; i++) {
        produced += 64 * 1024
        yield Buffer.alloc(64 * 1024, 7)
      }
      yield Buffer.from(`\r\n--${BOUNDARY}--\r\n`)
    }
    const res = await rawRequest(gw.origin, 'POST', '/v1/files', multipartHeaders, big())
    expect(res.status).toBe(413)
    expect(json(res).error).toMatchObject({
      type: 'invalid_request_error',
      code: 'payload_too_large',
      param: 'file',
    })
    expect(produced).toBeGreaterThan(MAX_FILE)
    // Nothing behind: no object, no temp file, no record.
    expect(await readdir(dir)).toEqual([])
    expect((await client.files.list()).data).toEqual([])

    // The SDK sees the 413 as an error with the status, not a connection failure.
    const viaSdk = await client.files
      .create({ purpose: 'user_data', file: await toFile(Buffer.alloc(1024 * 1024), 'big.bin') })
      .catch((e: unknown) => e)
    expect(viaSdk).toBeInstanceOf(OpenAI.APIError)
    expect((viaSdk as InstanceType<typeof OpenAI.APIError>).status).toBe(413)
    expect(await readdir(dir)).toEqual([])
    // Same client, next request: still served.
    expect((await client.files.list()).data).toEqual([])
  })

  it('never lets parallel uploads together exceed the file count', async () => {
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        upload(gw.origin, [
          { name: 'purpose', value: 'user_data' },
          { name: 'file', filename: `p${i}.txt`, data: Buffer.alloc(1000, 0x61) },
        ]),
      ),
    )
    const ok = results.filter((r) => r.status === 200)
    const refused = results.filter((r) => r.status !== 200)
    expect(ok).toHaveLength(3)
    for (const r of refused) expect(json(r).error).toMatchObject({ code: 'file_limit_exceeded' })
    expect(refused.every((r) => r.status === 400)).toBe(true)
    expect((await client.files.list()).data).toHaveLength(3)
    expect(await readdir(dir)).toHaveLength(3)
    await deleteAll()
  })

  it('refuses what the README says is refused: over 10 parts, a 101-byte field name, a 1,025-byte value', async () => {
    const file = { name: 'file', filename: 'a.txt', type: 'text/plain', data: Buffer.from('x') }
    const purpose = { name: 'purpose', value: 'user_data' }
    const send = (parts: FormPart[]) => upload(gw.origin, parts)
    const extra = (n: number) => Array.from({ length: n }, (_, i) => ({ name: `extra_${i}`, value: 'v' }))
    // 10 parts (the file, purpose and 8 more fields) are accepted, and the extra fields ignored.
    const ten = await send([purpose, ...extra(8), file])
    expect(ten.status).toBe(200)
    const refusals = [
      await send([purpose, ...extra(9), file]),
      await send([purpose, { name: 'n'.repeat(101), value: 'v' }, file]),
      await send([purpose, { name: 'note', value: 'v'.repeat(1025) }, file]),
      await send([{ name: 'purpose', value: 'u'.repeat(1025) }, file]),
    ]
    expect(refusals.map((r) => r.status)).toEqual([400, 400, 400, 400])
    expect(refusals.map((r) => json(r).error.code)).toEqual([
      'invalid_value',
      'invalid_value',
      'invalid_value',
      'invalid_value',
    ])
    expect(json(refusals[2]!).error.param).toBe('note')
    // Only the accepted upload left a file.
    expect((await client.files.list()).data).toHaveLength(1)
    await deleteAll()
  })

  it('refuses an upload that would take the account over its byte quota', async () => {
    await client.files.create({ purpose: 'user_data', file: await toFile(Buffer.alloc(60 * 1024), 'a.bin') })
    await client.files.create({ purpose: 'user_data', file: await toFile(Buffer.alloc(60 * 1024), 'b.bin') })
    const over = await client.files
      .create({ purpose: 'user_data', file: await toFile(Buffer.alloc(40 * 1024), 'c.bin') })
      .catch((e: unknown) => e)
    expect((over as InstanceType<typeof OpenAI.APIError>).status).toBe(413)
    expect((over as InstanceType<typeof OpenAI.APIError>).message).toContain('account')
    expect(await readdir(dir)).toHaveLength(2)
    // What still fits is accepted.
    const fits = await client.files.create({
      purpose: 'user_data',
      file: await toFile(Buffer.alloc(30 * 1024), 'd.bin'),
    })
    expect(fits.bytes).toBe(30 * 1024)
    await deleteAll()
  })

  it('answers 413 when a chat request references more file bytes than may be inlined', async () => {
    const a = await client.files.create({
      purpose: 'user_data',
      file: await toFile(Buffer.alloc(60 * 1024, 0x61), 'a.txt'),
    })
    const err = await client.chat.completions
      .create({
        model: 'mock/chat',
        messages: [
          {
            role: 'user',
            content: [
              { type: 'file', file: { file_id: a.id } },
              { type: 'file', file: { file_id: a.id } },
            ],
          },
        ],
      })
      .catch((e: unknown) => e)
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(413)
    expect((err as InstanceType<typeof OpenAI.APIError>).param).toBe('messages[0].content[1].file.file_id')
    const one = await client.chat.completions.create({
      model: 'mock/chat',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'read it' },
            { type: 'file', file: { file_id: a.id } },
          ],
        },
      ],
    })
    expect(one.choices[0]!.message.content).toContain('read it')
    await deleteAll()
  })
})

describe('files are per account', () => {
  let dir: string
  let gw: TestGateway
  const alice = { authorization: 'Bearer sk-alice-0123456789' }
  const bob = { authorization: 'Bearer sk-bob-0123456789' }

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'junction-files-accounts-'))
    gw = await startGateway({
      env: { GATEWAY_FILES_DIR: dir },
      file: {
        accounts: [
          { id: 'alice', keys: ['sk-alice-0123456789'] },
          // Credits: a chat from an account with none is refused (402) before its body is read.
          { id: 'bob', keys: ['sk-bob-0123456789'], credits: 1 },
        ],
      },
      listen: true,
    })
  })

  afterAll(async () => {
    await gw?.close()
    await rm(dir, { recursive: true, force: true })
  })

  it("hides one account's files from another: list, get, content, delete and chat references", async () => {
    const parts: FormPart[] = [
      { name: 'purpose', value: 'user_data' },
      { name: 'file', filename: 'secret.txt', type: 'text/plain', data: Buffer.from('alice only') },
    ]
    const up = await upload(gw.origin, parts, { ...multipartHeaders, ...alice })
    expect(up.status).toBe(200)
    const { id } = JSON.parse(up.body) as { id: string }

    const bobsList = await rawRequest(gw.origin, 'GET', '/v1/files', bob)
    expect(JSON.parse(bobsList.body).data).toEqual([])
    for (const [method, path] of [
      ['GET', `/v1/files/${id}`],
      ['GET', `/v1/files/${id}/content`],
      ['DELETE', `/v1/files/${id}`],
    ] as const) {
      const res = await rawRequest(gw.origin, method, path, bob)
      expect(res.status).toBe(404)
      expect(json(res).error.code).toBe('file_not_found')
      expect(res.body).not.toContain('alice only')
    }
    const chat = await rawRequest(
      gw.origin,
      'POST',
      '/v1/chat/completions',
      { ...bob, 'content-type': 'application/json' },
      [
        JSON.stringify({
          model: 'mock/chat',
          messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: id } }] }],
        }),
      ],
    )
    expect(chat.status).toBe(400)
    expect(json(chat).error).toMatchObject({
      code: 'invalid_value',
      param: 'messages[0].content[0].image_url.url',
    })

    // Still there for alice.
    const content = await rawRequest(gw.origin, 'GET', `/v1/files/${id}/content`, alice)
    expect(content.status).toBe(200)
    expect(content.body).toBe('alice only')
    expect(content.headers['content-type']).toBe('text/plain')
    expect(JSON.parse((await rawRequest(gw.origin, 'GET', '/v1/files', alice)).body).data).toHaveLength(1)
  })
})
