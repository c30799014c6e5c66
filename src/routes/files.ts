import multipart from '@fastify/multipart'
import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import { z } from 'zod'
import type { Deps } from '../deps.ts'
import { GatewayError } from '../errors.ts'
import { toFileObject } from '../schemas/files.ts'
import { StorageObjectNotFoundError } from '../files/storage.ts'
import { MULTIPART_LIMITS, uploadFile } from '../files/upload.ts'
import { owned } from '../owned.ts'
import { parseQuery } from '../schemas/query.ts'
import { FILE_PURPOSES, type StoredFile } from '../store/types.ts'

// docs/design/decisions.md, Files: upload (multipart, streamed to storage: files/upload.ts), list newest first,
// retrieve, content, delete. Every lookup is by the caller's account: another account's id is a 404,
// never a 403.

const listQuerySchema = z.looseObject({
  purpose: z.enum(FILE_PURPOSES).optional(),
  limit: z.coerce.number().int().min(1).max(10_000).default(10_000),
  order: z.enum(['asc', 'desc']).default('desc'),
  after: z.string().min(1).max(200).optional(),
})

export const filesRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const { store, fileStorage, config } = deps
  const upload = {
    files: store.files,
    storage: fileStorage,
    limits: config.files,
    now: deps.now,
    log: deps.log,
  }

  // Registered here, so only this plugin's routes parse multipart; everything else stays JSON only.
  await app.register(multipart, { limits: MULTIPART_LIMITS })

  const findFile = async (request: FastifyRequest): Promise<StoredFile> => {
    const { id } = request.params as { id: string }
    return owned(request.account.id, await store.files.get(request.account.id, id), () => fileNotFound(id))
  }

  app.post('/v1/files', async (request) => {
    if (!request.isMultipart()) {
      throw new GatewayError(
        'unsupported_media_type',
        'POST /v1/files takes multipart/form-data with the parts file and purpose',
      )
    }
    const file = await uploadFile(upload, {
      accountId: request.account.id,
      parts: (fileSize) => request.parts({ limits: { ...MULTIPART_LIMITS, fileSize } }),
      drain: () => drainRequest(request),
    })
    request.log.info({ fileId: file.id, bytes: file.bytes, purpose: file.purpose }, 'file stored')
    return toFileObject(file)
  })

  app.get('/v1/files', async (request) => {
    const q = parseQuery(listQuerySchema, request.query)
    const { files, hasMore } = await store.files.list(request.account.id, {
      purpose: q.purpose,
      order: q.order,
      after: q.after,
      limit: q.limit,
    })
    const data = files.map(toFileObject)
    return {
      object: 'list' as const,
      data,
      first_id: data[0]?.id ?? null,
      last_id: data.at(-1)?.id ?? null,
      has_more: hasMore,
    }
  })

  app.get('/v1/files/:id', async (request) => toFileObject(await findFile(request)))

  app.get('/v1/files/:id/content', async (request, reply) => {
    const file = await findFile(request)
    let opened
    try {
      opened = await fileStorage.open(file.storageKey)
    } catch (err) {
      // Deleted between the lookup and the open.
      if (err instanceof StorageObjectNotFoundError) throw fileNotFound(file.id)
      throw err
    }
    return reply
      .header('content-type', file.contentType)
      .header('content-length', String(opened.bytes))
      .header('content-disposition', contentDisposition(file.filename))
      .header('x-content-type-options', 'nosniff')
      .send(opened.stream)
  })

  app.delete('/v1/files/:id', async (request) => {
    const { id } = request.params as { id: string }
    // The record goes first: from then on nobody can list or reference the file, then its bytes go.
    const file = owned(request.account.id, await store.files.delete(request.account.id, id), () =>
      fileNotFound(id),
    )
    await fileStorage.remove(file.storageKey)
    request.log.info({ fileId: file.id }, 'file deleted')
    return { id: file.id, object: 'file' as const, deleted: true }
  })
}

function fileNotFound(id: string): GatewayError {
  return new GatewayError('file_not_found', `no file ${JSON.stringify(id.slice(0, 200))}`)
}

/**
 * Before an early answer the multipart parser is stopped (nothing more is parsed or kept) and bytes
 * still arriving are dropped until the answer is out; the answer then closes the connection (app.ts),
 * so the rest of the upload is never read.
 */
function drainRequest(request: FastifyRequest): void {
  const raw = request.raw
  if (raw.readableEnded || raw.destroyed) return
  raw.unpipe()
  raw.resume()
}

/** `attachment` with the name as an ASCII fallback and RFC 5987 UTF-8, so no name can break the header. */
function contentDisposition(filename: string): string {
  const ascii = filename.replace(/[^A-Za-z0-9._ -]/g, '_') || 'file'
  const encoded = encodeURIComponent(filename).replace(
    /['()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  )
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encoded}`
}
