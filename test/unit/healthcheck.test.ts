import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.ts'
import { healthcheckUrl } from '../../src/healthcheck.ts'
import { startGateway } from '../support/gateway.ts'

const withFile = (file: unknown, env: Record<string, string> = {}) =>
  loadConfig({ GATEWAY_CONFIG: 'junction.json', ...env }, () => JSON.stringify(file))

describe('container health check', () => {
  it('asks where the configuration says the gateway listens, not only PORT', () => {
    expect(healthcheckUrl(withFile({}))).toBe('http://127.0.0.1:8080/healthz')
    expect(healthcheckUrl(withFile({ server: { port: 9090 } }))).toBe('http://127.0.0.1:9090/healthz')
    expect(healthcheckUrl(withFile({ server: { host: '127.0.0.1', port: 9090 } }, { PORT: '7070' }))).toBe(
      'http://127.0.0.1:7070/healthz',
    )
    expect(healthcheckUrl(withFile({ server: { host: '::1', port: 1 } }))).toBe('http://[::1]:1/healthz')
  })

  it('exits 0 against a healthy gateway, 1 when nothing answers', async () => {
    const gw = await startGateway({ listen: true })
    try {
      const port = new URL(gw.origin).port
      const run = async (env: Record<string, string>) => {
        const child = spawn(
          process.execPath,
          [
            '--disable-warning=ExperimentalWarning',
            new URL('../../src/healthcheck.ts', import.meta.url).pathname,
          ],
          { env: { PATH: process.env.PATH ?? '', ...env }, stdio: 'ignore' },
        )
        const [code] = await once(child, 'exit')
        return code
      }
      expect(await run({ PORT: port, NODE_ENV: 'test' })).toBe(0)
      expect(await run({ PORT: '1', NODE_ENV: 'test' })).toBe(1)
    } finally {
      await gw.close()
    }
  })
})
