import { Validator } from '@seriousme/openapi-schema-validator'
import { Ajv2020 } from 'ajv/dist/2020.js'
import addFormats from 'ajv-formats'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildOpenApi } from '../../src/openapi/document.ts'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// The OpenAPI document: valid OpenAPI 3.1 by a standard validator, an entry for every route the app
// registers (and none for a route it does not), and answer schemas that real answers fit.

const ADMIN = 'admin-key-for-openapi-0001'
const admin = { authorization: `Bearer ${ADMIN}` }
const json = { ...devAuth, 'content-type': 'application/json' }

/** Routes deliberately left out of the document, and why. */
const NOT_DOCUMENTED: Record<string, string> = {
  'GET /docs/assets/{}': "the rendered page's own files (Swagger UI's script, style sheet and icon)",
  'GET /console/{}': "the console's own files (content-hashed scripts, style sheet, chart library)",
}

type Doc = { paths: Record<string, Record<string, unknown>>; components: { schemas: Record<string, object> } }

/** `METHOD /path` for every route of the app, from Fastify's route tree; HEAD and OPTIONS left out. */
function registeredRoutes(tree: string): string[] {
  const out: string[] = []
  const stack: string[] = []
  for (const line of tree.split('\n')) {
    const m = /^((?:[│ ] {3})*)[├└]── (.+?)(?: \(([A-Z, ]+)\))?$/.exec(line)
    if (!m) continue
    const depth = (m[1] as string).length / 4
    const segment = m[2] as string
    stack.length = depth
    // A child is the rest of its parent's path: `/:id` and `/content` start a segment, `s` continues one
    // (`/v1/key` → `/v1/keys`), and `*` is the wildcard segment (`/v1/models/*`).
    stack.push(segment === '*' ? '/*' : segment)
    const path = stack
      .join('')
      .replace(/:(\w+)/g, '{}')
      .replace(/\*$/, '{}')
    for (const method of (m[3] ?? '')
      .split(', ')
      .filter((x) => x !== '' && x !== 'HEAD' && x !== 'OPTIONS')) {
      out.push(`${method} ${path}`)
    }
  }
  return out
}

const documentedRoutes = (doc: Doc): string[] =>
  Object.entries(doc.paths).flatMap(([path, ops]) =>
    Object.keys(ops).map((method) => `${method.toUpperCase()} ${path.replace(/\{\w+\}/g, '{}')}`),
  )

describe('OpenAPI document', () => {
  let gw: TestGateway
  let doc: Doc
  beforeAll(async () => {
    gw = await startGateway({ env: { GATEWAY_ADMIN_KEY: ADMIN, MOCK_TASK_DELAY_MS: '0' } })
    const res = await gw.app.inject({ url: '/openapi.json' })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toMatch(/^application\/json/)
    doc = res.json() as Doc
  })
  afterAll(() => gw.close())

  it('is served without a key, and is the document the code builds', () => {
    expect(doc).toEqual(JSON.parse(JSON.stringify(buildOpenApi())))
    expect((doc as unknown as { openapi: string }).openapi).toMatch(/^3\.1\./)
  })

  it('is valid OpenAPI 3.1 by the standard schema (which also rejects a broken copy)', async () => {
    const validator = new Validator()
    const result = await validator.validate(JSON.parse(JSON.stringify(doc)) as Record<string, unknown>)
    expect(result.errors ?? []).toEqual([])
    expect(result.valid).toBe(true)
    expect(validator.version).toBe('3.1')
    // The validator is live: a parameter that does not say where it goes is refused.
    const broken = JSON.parse(JSON.stringify(doc)) as Doc
    delete (broken.paths['/v1/generation']!.get as { parameters: { in?: string }[] }).parameters[0]!.in
    expect((await new Validator().validate(broken as Record<string, unknown>)).valid).toBe(false)
  })

  it("every schema is valid JSON Schema 2020-12, OpenAPI 3.1's dialect (the validator above does not look inside)", () => {
    const ajv = new Ajv2020({ strict: false })
    for (const [name, schema] of Object.entries(doc.components.schemas)) {
      expect(ajv.validateSchema(schema), `${name}: ${ajv.errorsText()}`).toBe(true)
    }
    expect(ajv.validateSchema({ type: 'strin' })).toBe(false)
  })

  it('has an entry for every route the app registers, and none for a route it does not', () => {
    const registered = registeredRoutes(gw.app.printRoutes({ commonPrefix: false }))
    expect(registered.length).toBeGreaterThan(40)
    const documented = documentedRoutes(doc)
    const missing = registered.filter((r) => !documented.includes(r) && !(r in NOT_DOCUMENTED))
    expect(missing, 'add these routes to src/openapi/document.ts (ROUTES)').toEqual([])
    const stale = documented.filter((r) => !registered.includes(r))
    expect(stale, 'these documented routes do not exist').toEqual([])
  })

  it('unit: the route tree is read into methods and paths', () => {
    const tree = [
      '├── /v1/files (POST, GET, HEAD)',
      '│   └── /:id (GET, HEAD, DELETE)',
      '├── /v1/key (GET)',
      '│   └── s (GET)',
      '└── /m (GET)',
      '    └── * (GET)',
    ].join('\n')
    expect(registeredRoutes(tree)).toEqual([
      'POST /v1/files',
      'GET /v1/files',
      'GET /v1/files/{}',
      'DELETE /v1/files/{}',
      'GET /v1/key',
      'GET /v1/keys',
      'GET /m',
      'GET /m/{}',
    ])
  })

  describe('real answers fit the answer schemas', () => {
    let ajv: Ajv2020
    beforeAll(() => {
      ajv = new Ajv2020({ strict: false, allErrors: true })
      addFormats.default(ajv)
      ajv.addSchema({ $id: 'doc', components: doc.components }, 'doc')
    })
    const fits = (schema: string, body: unknown): void => {
      const validate = ajv.getSchema(`doc#/components/schemas/${schema}`)
      expect(validate, schema).toBeDefined()
      const ok = validate!(body)
      expect(validate!.errors ?? [], `${schema}: ${JSON.stringify(body).slice(0, 300)}`).toEqual([])
      expect(ok).toBe(true)
    }
    const chat = { model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }] }

    it('chat, its stream chunks, embeddings, models, credits and the generation record', async () => {
      const answer = await gw.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: json,
        payload: chat,
      })
      fits('ChatCompletion', answer.json())
      const stream = await gw.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: json,
        payload: { ...chat, stream: true, stream_options: { include_usage: true } },
      })
      const chunks = stream.body
        .split('\n')
        .filter((l) => l.startsWith('data: {'))
        .map((l) => JSON.parse(l.slice(6)) as unknown)
      expect(chunks.length).toBeGreaterThan(2)
      for (const chunk of chunks) fits('ChatCompletionChunk', chunk)
      const embeddings = await gw.app.inject({
        method: 'POST',
        url: '/v1/embeddings',
        headers: json,
        payload: { model: 'mock/embed', input: ['a', 'b'], dimensions: 4 },
      })
      fits('Embeddings', embeddings.json())
      fits('ModelList', (await gw.app.inject({ url: '/v1/models', headers: devAuth })).json())
      fits('Model', (await gw.app.inject({ url: '/v1/models/mock/image', headers: devAuth })).json())
      fits('Credits', (await gw.app.inject({ url: '/v1/credits', headers: devAuth })).json())
      const id = answer.json().id as string
      fits('Generation', (await gw.app.inject({ url: `/v1/generation?id=${id}`, headers: devAuth })).json())
    })

    it('the dialects: a Messages answer, a token count, a Responses answer', async () => {
      const message = await gw.app.inject({
        method: 'POST',
        url: '/v1/messages',
        headers: json,
        payload: { ...chat, max_tokens: 64 },
      })
      fits('AnthropicMessage', message.json())
      const count = await gw.app.inject({
        method: 'POST',
        url: '/v1/messages/count_tokens',
        headers: json,
        payload: chat,
      })
      fits('TokenCount', count.json())
      const response = await gw.app.inject({
        method: 'POST',
        url: '/v1/responses',
        headers: json,
        payload: { model: 'mock/chat', input: 'hi' },
      })
      fits('Response', response.json())
    })

    it('files, predictions and the webhook secret', async () => {
      const boundary = 'openapi-test-boundary'
      const upload = await gw.app.inject({
        method: 'POST',
        url: '/v1/files',
        headers: { ...devAuth, 'content-type': `multipart/form-data; boundary=${boundary}` },
        payload:
          `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n` +
          `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n` +
          `Content-Type: text/plain\r\n\r\nhello\r\n--${boundary}--\r\n`,
      })
      fits('File', upload.json())
      fits('FileList', (await gw.app.inject({ url: '/v1/files', headers: devAuth })).json())
      const deleted = await gw.app.inject({
        method: 'DELETE',
        url: `/v1/files/${upload.json().id}`,
        headers: devAuth,
      })
      fits('Deleted', deleted.json())
      const created = await gw.app.inject({
        method: 'POST',
        url: '/v1/predictions',
        headers: json,
        payload: { model: 'mock/image', input: { prompt: 'a lighthouse' } },
      })
      fits('PredictionCreated', created.json())
      const task = await gw.app.inject({
        url: `/v1/predictions/${created.json().data.task_id}`,
        headers: devAuth,
      })
      fits('Prediction', task.json())
      fits('WebhookSecret', (await gw.app.inject({ url: '/v1/webhooks/secret', headers: devAuth })).json())
    })

    it('the admin API and the error envelope', async () => {
      const account = await gw.app.inject({
        method: 'POST',
        url: '/admin/accounts',
        headers: { ...admin, 'content-type': 'application/json' },
        payload: { id: 'openapi', credits: 1 },
      })
      expect(account.statusCode).toBe(201)
      fits('Account', account.json())
      fits('AccountList', (await gw.app.inject({ url: '/admin/accounts', headers: admin })).json())
      const key = await gw.app.inject({ method: 'POST', url: '/admin/accounts/openapi/keys', headers: admin })
      fits('IssuedKey', key.json())
      fits('KeyList', (await gw.app.inject({ url: '/admin/accounts/openapi/keys', headers: admin })).json())
      fits(
        'GenerationPage',
        (await gw.app.inject({ url: '/admin/accounts/dev/generations', headers: admin })).json(),
      )
      const refused = await gw.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: json,
        payload: { ...chat, n: 2 },
      })
      expect(refused.statusCode).toBe(400)
      fits('Error', refused.json())
      const anthropic = await gw.app.inject({
        method: 'POST',
        url: '/v1/messages',
        headers: json,
        payload: chat,
      })
      expect(anthropic.statusCode).toBe(400)
      fits('AnthropicError', anthropic.json())
    })
  })

  it('a wrong answer schema is caught: the chat schema refuses a chunk', () => {
    const ajv = new Ajv2020({ strict: false })
    ajv.addSchema({ $id: 'doc', components: doc.components }, 'doc')
    const validate = ajv.getSchema('doc#/components/schemas/ChatCompletion')!
    expect(
      validate({ id: 'gen-x', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [] }),
    ).toBe(false)
  })
})

describe('the rendered reference at /docs', () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway()
  })
  afterAll(() => gw.close())

  it('is a page whose every asset the gateway serves itself: no CDN', async () => {
    const page = await gw.app.inject({ url: '/docs' })
    expect(page.statusCode).toBe(200)
    expect(page.headers['content-type']).toMatch(/^text\/html/)
    const assets = [...page.body.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1] as string)
    expect(assets.length).toBeGreaterThanOrEqual(3)
    for (const url of assets) {
      expect(url, 'assets are the gateway’s own').toMatch(/^\/docs\/assets\//)
      const res = await gw.app.inject({ url })
      expect(res.statusCode, url).toBe(200)
      expect(res.rawPayload.length, url).toBeGreaterThan(0)
    }
    const bundle = await gw.app.inject({ url: '/docs/assets/swagger-ui-bundle.js' })
    expect(bundle.headers['content-type']).toMatch(/javascript/)
    expect(bundle.body).toContain('SwaggerUIBundle')
    const init = await gw.app.inject({ url: '/docs/assets/init.js' })
    expect(init.body).toContain("url: '/openapi.json'")
    // Nor does the page send the document to Swagger's online validator.
    expect(init.body).toContain('validatorUrl: null')
  })

  it('serves nothing but its listed files', async () => {
    for (const name of ['package.json', '..%2Fpackage.json', 'swagger-ui.js.map']) {
      const res = await gw.app.inject({ url: `/docs/assets/${name}` })
      expect(res.statusCode, name).toBe(404)
      expect(res.json().error.code).toBe('route_not_found')
    }
  })
})
