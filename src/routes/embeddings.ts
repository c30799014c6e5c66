import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { Deps } from '../deps.ts'
import { createEmbeddings } from '../inference/embeddings.ts'
import { parseEmbeddingsRequest } from '../schemas/embeddings.ts'
import type { AttemptRecord } from '../domain/records.ts'
import { finishInTurns, type Sliced } from '../turns.ts'
import { admitBeforeBody, attemptHeaders } from './admission.ts'
import { upstreamSignal } from './upstream-signal.ts'
import type { EmbeddingsResponse } from '../domain/chat.ts'

export const embeddingsRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    const req = parseEmbeddingsRequest(request.body)
    let attempts: readonly AttemptRecord[] = []
    const result = await createEmbeddings(deps, {
      account: request.account,
      key: request.apiKey,
      req,
      api: request.routeOptions.url ?? '/routed/v1/embeddings',
      signal: upstreamSignal(reply),
      log: request.log,
      onAdmitted: (id, headers, tried) => {
        reply.headers(headers).header('x-generation-id', id)
        attempts = tried
      },
      requestCounted: request.junction.requestCounted,
      preAdmission: request.junction.deferredAdmission,
      onRecord: (record) => {
        request.junction.record = record
      },
      traceparent: request.junction.trace?.traceparent,
    }).catch((err: unknown) => {
      reply.headers(attemptHeaders(attempts))
      throw err
    })
    reply.headers(result.headers)
    // Built in turns: a large answer's JSON.stringify alone would hold the event loop for tens of ms.
    const json = await finishInTurns(embeddingsJsonSteps(result.body))
    return reply.type('application/json; charset=utf-8').send(json)
  }
  const onRequest = admitBeforeBody(deps, { deferWhenReceived: true })
  app.post('/routed/v1/embeddings', { onRequest }, handler)
  app.post('/v1/embeddings', { onRequest }, handler)
}

/** Floats (or characters of a base64 vector, four to a float) serialised between two checkpoints. */
export const SERIALIZE_UNITS_PER_CHECKPOINT = 16_384

/**
 * The answer's JSON text, the same as JSON.stringify gives, built one vector at a time with a checkpoint
 * every {@link SERIALIZE_UNITS_PER_CHECKPOINT} floats: 2 048 vectors of 256 floats are half a million
 * numbers, 55 ms of JSON.stringify in one go.
 */
export function* embeddingsJsonSteps(body: EmbeddingsResponse): Sliced<string> {
  const fields: string[] = []
  let units = 0
  for (const [key, value] of Object.entries(body)) {
    if (value === undefined) continue
    if (key !== 'data' || !Array.isArray(value)) {
      fields.push(`${JSON.stringify(key)}:${JSON.stringify(value)}`)
      continue
    }
    const items: string[] = []
    for (const item of value as EmbeddingsResponse['data']) {
      items.push(JSON.stringify(item))
      units += typeof item.embedding === 'string' ? item.embedding.length / 4 : item.embedding.length
      if (units >= SERIALIZE_UNITS_PER_CHECKPOINT) {
        units = 0
        yield
      }
    }
    fields.push(`"data":[${items.join(',')}]`)
  }
  return `{${fields.join(',')}}`
}
