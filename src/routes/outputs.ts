import type { FastifyPluginAsync } from 'fastify'
import { z } from 'zod'
import type { Deps } from '../deps.ts'
import { GatewayError } from '../errors.ts'
import { StorageObjectNotFoundError } from '../files/storage.ts'
import { parseRange, type RangeRequest } from '../http/range.ts'
import { parseQuery } from '../schemas/query.ts'
import { assertOutputSignature } from '../auth/index.ts'
import { extensionFor } from '../predictions/outputs.ts'

// GET /v1/outputs/{id}?expires=…&signature=… (docs/design/decisions.md, Predictions): the hosted result of a
// prediction. No bearer header: the signature is the authorisation, so the URL can be handed to a
// browser or another service. A tampered or foreign signature and an expired URL are 403; an output
// deleted after its retention is 404.

/** A malformed parameter (given twice, say) is a URL that is not valid: 403 below, not a 400. */
const signedUrlQuery = z.object({
  expires: z.string().optional().catch(undefined),
  signature: z.string().optional().catch(undefined),
})

export const outputsRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  app.get<{ Params: { id: string } }>('/v1/outputs/:id', async (request, reply) => {
    const { id } = request.params
    const { expires, signature } = parseQuery(signedUrlQuery, request.query)
    assertOutputSignature(deps.signingKey, id, expires, signature, deps.now())
    const gone = () => new GatewayError('output_not_found', 'this output no longer exists')
    const output = await deps.store.outputs.get(id)
    if (!output || output.expiresAt <= deps.now()) throw gone()
    let range: RangeRequest = { kind: 'whole' }
    let opened
    try {
      opened = await deps.outputStorage.open(output.storageKey, (bytes) => {
        range = parseRange(request.headers.range, bytes)
        return range.kind === 'part' ? range : undefined
      })
    } catch (err) {
      if (err instanceof StorageObjectNotFoundError) throw gone()
      throw err
    }
    // A video player seeks with byte ranges (Safari plays no video without them).
    const r = range as RangeRequest
    if (r.kind === 'unsatisfiable') {
      opened.stream.destroy()
      throw new GatewayError(
        'range_not_satisfiable',
        `the range ${request.headers.range} starts past the end of this output (${opened.bytes} bytes)`,
        { headers: { 'content-range': `bytes */${opened.bytes}` } },
      )
    }
    reply
      .header('accept-ranges', 'bytes')
      .header('cache-control', 'private, max-age=3600')
      .header('x-content-type-options', 'nosniff')
    if (r.kind === 'part') {
      reply.code(206).header('content-range', `bytes ${r.start}-${r.end}/${opened.bytes}`)
    }
    return reply
      .header('content-type', output.contentType)
      .header('content-length', String(r.kind === 'part' ? r.end - r.start + 1 : opened.bytes))
      .header('content-disposition', `inline; filename="${output.id}.${extensionFor(output.contentType)}"`)
      .send(opened.stream)
  })
}
