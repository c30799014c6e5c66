import { execFile } from 'node:child_process'
import { createHmac } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterAll, describe, expect, it, onTestFinished } from 'vitest'
import { useServerProcesses } from '../support/server-process.ts'
import { codeBlocks, readPage, type DocPage } from '../support/docs.ts'

// The docs' curl examples, run as written by bash and curl against the real server (only the address
// is changed to the test's port, and a listed file's id put in for the `file-…` placeholder).
// getting-started.test.ts walks the getting-started page the same way, outputs compared.

const run = promisify(execFile)
const start = useServerProcesses()
const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

/** The shell blocks of a page that run curl (of one `## ` section of it, when named). */
function shBlocks(page: DocPage, heading?: string): string[] {
  let text = readPage(page)
  if (heading !== undefined) {
    const from = text.indexOf(`\n## ${heading}`)
    text = text.slice(from, text.indexOf('\n## ', from + 1))
  }
  return [...codeBlocks(text, 'sh'), ...codeBlocks(text, 'bash')].filter((b) => b.includes('curl '))
}

const firstJson = (page: DocPage): string => codeBlocks(readPage(page), 'json')[0] as string

/** Runs a block in bash from `cwd`, each curl reporting its status; returns [status, body] per curl. */
async function runBlock(block: string, origin: string, cwd: string): Promise<[number, string][]> {
  // Every curl of the block reports its status after its output.
  const script =
    `curl() { command curl "$@" -w '\\n@@%{http_code}@@\\n'; }\n` +
    block.replaceAll('localhost:8080', origin.replace('http://', ''))
  const { stdout } = await run('bash', ['-c', script], { cwd })
  return [...stdout.matchAll(/([\s\S]*?)\n?@@(\d{3})@@\n/g)].map((m) => [
    Number(m[2]),
    (m[1] as string).trim(),
  ])
}

function workspace(): string {
  const dir = mkdtempSync(join(tmpdir(), 'junction-readme-'))
  dirs.push(dir)
  return dir
}

describe('documented curl examples', () => {
  it('the README, the admin API and files: every example gives its documented status', async () => {
    const dir = workspace()
    const s = await start(
      {
        GATEWAY_DATABASE_URL: 'memory',
        GATEWAY_FILES_DIR: join(dir, 'files'),
        GATEWAY_ADMIN_KEY: 'change-me-admin-key-0123',
      },
      dir,
    )
    const [quick] = shBlocks('README.md', 'Run it')
    const quickResults = await runBlock(quick as string, s.origin, dir)
    expect(quickResults.map((r) => r[0])).toEqual([200, 200, 200, 200])
    expect(quickResults[1]![1]).toContain('data: [DONE]')

    const [adminBlock] = shBlocks('docs/operators/accounts-and-billing.md')
    const adminResults = await runBlock(adminBlock as string, s.origin, dir)
    expect(adminResults.map((r) => r[0])).toEqual([201, 201])
    expect(JSON.parse(adminResults[1]![1]).key).toMatch(/^sk-jn-/)

    writeFileSync(join(dir, 'report.pdf'), '%PDF-1.4 a tiny test document')
    const [filesBlock] = shBlocks('docs/clients/files.md')
    const lines = (filesBlock as string).split('\n')
    const uploaded = await runBlock(lines.slice(0, 2).join('\n'), s.origin, dir)
    expect(uploaded.map((r) => r[0])).toEqual([200, 200])
    const id = JSON.parse(uploaded[0]![1]).id as string
    const rest = await runBlock(lines.slice(2).join('\n').replaceAll('file-…', id), s.origin, dir)
    expect(rest.map((r) => r[0])).toEqual([200, 200])
    // The download goes to a new file: the reader's own report.pdf is left as it was.
    expect(readFileSync(join(dir, 'report.pdf'), 'utf8')).toBe('%PDF-1.4 a tiny test document')
    expect(readFileSync(join(dir, 'report-copy.pdf'), 'utf8')).toBe('%PDF-1.4 a tiny test document')
  })

  it('the Messages and Responses examples answer in their dialects', async () => {
    const dir = workspace()
    const s = await start({ GATEWAY_DATABASE_URL: 'memory' }, dir)
    const blocks = [...shBlocks('docs/clients/messages.md'), ...shBlocks('docs/clients/responses.md')]
    const results = await Promise.all(blocks.map((b) => runBlock(b, s.origin, dir)))
    const answers = results.flat()
    expect(answers.map((r) => r[0])).toEqual([200, 200])
    const [message, response] = answers.map((r) => JSON.parse(r[1]))
    expect(message).toMatchObject({
      type: 'message',
      role: 'assistant',
      model: 'mock/chat',
      stop_reason: 'end_turn',
    })
    expect(response).toMatchObject({ object: 'response', status: 'completed', model: 'mock/chat' })
  })

  it('routing: the example request answers with the example config of the operator page', async () => {
    const dir = workspace()
    writeFileSync(join(dir, 'junction.json'), firstJson('docs/operators/routing.md'))
    const s = await start({ GATEWAY_DATABASE_URL: 'memory', GATEWAY_CONFIG: join(dir, 'junction.json') }, dir)
    const [block] = shBlocks('docs/clients/routing.md')
    const results = await runBlock(block as string, s.origin, dir)
    // Nothing listens on the example's two upstreams here: the request's fallback answers.
    expect(results.map((r) => r[0])).toEqual([200])
    expect(JSON.parse(results[0]![1]).model).toBe('mock/chat')
  })

  it('Predictions: the walk-through creates a task, reads it, downloads its PNG and shows its charge', async () => {
    const dir = workspace()
    const s = await start(
      { GATEWAY_DATABASE_URL: 'memory', GATEWAY_OUTPUTS_DIR: join(dir, 'outputs'), MOCK_TASK_DELAY_MS: '0' },
      dir,
    )
    const [block] = shBlocks('docs/clients/predictions.md')
    const lines = (block as string).split('\n').filter((l) => l.trim() !== '' && !l.startsWith('#'))
    // The create command spans two lines (a backslash continuation).
    const created = await runBlock(lines.slice(0, 2).join('\n'), s.origin, dir)
    expect(created.map((r) => r[0])).toEqual([200])
    const id = JSON.parse(created[0]![1]).data.task_id as string
    let body
    do {
      const res = await runBlock(lines[2]!.replaceAll('4f0c…', id), s.origin, dir)
      expect(res[0]![0]).toBe(200)
      body = JSON.parse(res[0]![1])
    } while (body.data.task_status === 'processing')
    expect(body.data.task_status).toBe('success')
    expect(body.usage).toEqual({ upstream_cost: 0.02, discount: 0, discount_percent: 0, cost: 0.02 })
    const url = body.data.output[0].image as string
    const rest = await runBlock(
      lines
        .slice(3)
        .join('\n')
        .replaceAll('4f0c…', id)
        .replaceAll("'http://localhost:8080/v1/outputs/out_…?expires=…&signature=…'", `'${url}'`),
      s.origin,
      dir,
    )
    expect(rest.map((r) => r[0])).toEqual([200, 200, 200])
    expect(readFileSync(join(dir, 'picture.png')).subarray(1, 4).toString('latin1')).toBe('PNG')
    expect(JSON.parse(rest[1]![1])).toMatchObject({ generationId: id, api: '/v1/predictions' })
    expect(JSON.parse(rest[2]![1]).data.total_usage).toBe(0.02)
  })

  it('Predictions: the webhook example delivers a signed body to the local receiver', async () => {
    const dir = workspace()
    writeFileSync(join(dir, 'junction.json'), firstJson('docs/clients/webhooks.md'))
    const hooks: { headers: Record<string, unknown>; body: string }[] = []
    const receiver = createServer((req, res) => {
      let body = ''
      req.on('data', (c: Buffer) => (body += c.toString()))
      req.on('end', () => {
        hooks.push({ headers: req.headers, body })
        res.writeHead(204).end()
      })
    })
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve))
    onTestFinished(() => new Promise<void>((resolve) => receiver.close(() => resolve())))
    const port = (receiver.address() as AddressInfo).port
    const s = await start(
      {
        GATEWAY_DATABASE_URL: 'memory',
        GATEWAY_CONFIG: join(dir, 'junction.json'),
        GATEWAY_OUTPUTS_DIR: join(dir, 'outputs'),
        MOCK_TASK_DELAY_MS: '0',
      },
      dir,
    )
    const [block] = shBlocks('docs/clients/webhooks.md') as [string]
    const results = await runBlock(block.replaceAll('127.0.0.1:9000', `127.0.0.1:${port}`), s.origin, dir)
    expect(results.map((r) => r[0])).toEqual([200, 200])
    expect(JSON.parse(results[1]![1])).toEqual({
      object: 'webhook_secret',
      secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    })
    const id = JSON.parse(results[0]![1]).data.task_id as string
    while (hooks.length === 0) await new Promise((r) => setTimeout(r, 50))
    expect(hooks[0]!.headers['webhook-id']).toBe(`msg_${id}`)
    expect(JSON.parse(hooks[0]!.body).data.task_status).toBe('success')
    const key = Buffer.from('MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'base64')
    const signed = `${hooks[0]!.headers['webhook-id']}.${hooks[0]!.headers['webhook-timestamp']}.${hooks[0]!.body}`
    expect(hooks[0]!.headers['webhook-signature']).toBe(
      `v1,${createHmac('sha256', key).update(signed).digest('base64')}`,
    )
    // The page's own verification code, as a receiver would paste it, accepts the delivery and
    // refuses it once its body is changed.
    const snippet = /^ {2}```ts\n([\s\S]*?)^ {2}```/m.exec(readPage('docs/clients/webhooks.md'))?.[1] ?? ''
    expect(snippet).toContain('function verify')
    const file = join(dir, 'verify.ts')
    writeFileSync(file, `${snippet.replace(/^ {2}/gm, '')}\nexport { verify }\n`)
    const { verify } = (await import(file)) as {
      verify: (secret: string, headers: Record<string, string>, body: string) => boolean
    }
    const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
    const headers = hooks[0]!.headers as Record<string, string>
    expect(verify(secret, headers, hooks[0]!.body)).toBe(true)
    expect(verify(secret, headers, hooks[0]!.body.replace('success', 'failed'))).toBe(false)
  })
})
