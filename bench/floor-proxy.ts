import Fastify from 'fastify'
import { Pool } from 'undici'

// The floor: the least any Node proxy on Fastify + undici can do. No auth, no validation, no
// parsing: the request body goes to the upstream as bytes and the answer is piped back as it comes.
// Whatever the gateway costs above this is the gateway's own work.

const upstream = process.env.UPSTREAM_ORIGIN
if (!upstream) throw new Error('UPSTREAM_ORIGIN is required')

// Enough connections for the 1000 held streams of the memory measurement.
const pool = new Pool(upstream, { connections: 2_000, keepAliveTimeout: 30_000 })
const app = Fastify({ logger: false, keepAliveTimeout: 72_000 })

app.removeAllContentTypeParsers()
app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))

app.post('/v1/chat/completions', async (request, reply) => {
  const hold = request.headers['x-bench-hold']
  const res = await pool.request({
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { 'content-type': 'application/json', ...(hold === undefined ? {} : { 'x-bench-hold': hold }) },
    body: request.body as Buffer,
  })
  reply.code(res.statusCode)
  const type = res.headers['content-type']
  if (type !== undefined) reply.header('content-type', type)
  return reply.send(res.body)
})

await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 0) })

process.on('SIGTERM', () => {
  void app.close().then(() => pool.close().finally(() => process.exit(0)))
})
