import multipart from '@fastify/multipart'
import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import { z } from 'zod'
import type { Deps } from '../deps.ts'
import { GatewayError, fromZodError, invalidRequest, toGatewayError } from '../errors.ts'
import { toStoredContentType } from '../files/content-type.ts'
import { newFileId, toFileObject } from '../files/file-object.ts'
import { FileTooLargeError, StorageObjectNotFoundError, type StoredObject } from '../files/storage.ts'
import { FILE_PURPOSES, type FilePurpose, type StoredFile } from '../store/files.ts'

// docs/design/decisions.md, Files: upload (multipart, streamed to storage), list newest first, retrieve, content,
// delete. Every lookup is by the caller's account: another account's id is a 404, never a 403.

/** Bounds on the multipart body besides the file size: one file, a few small fields. */
export const MULTIPART_LIMITS = {
  files: 1,
  /** `purpose`, and room for fields OpenAI SDKs may add (`expires_after[…]`), which are ignored. */
  fields: 9,
  /** The file and 9 fields. */
  parts: 10,
  /** Checked by the route (busboy does not enforce it). */
  fieldNameSize: 100,
  fieldSize: 1024,
  headerPairs: 20,
} as const

const MAX_FILENAME_LENGTH = 512

/**
 * How long an upload holds its file slot. It frees the slot of an upload whose process died mid-way;
 * an upload still running after it is refused (408), which at the default 512 MB limit needs a client
 * slower than about 150 kB/s.
 */
export const UPLOAD_RESERVATION_TTL_MS = 60 * 60_000

const listQuerySchema = z.looseObject({
  purpose: z.enum(FILE_PURPOSES).optional(),
  limit: z.coerce.number().int().min(1).max(10_000).default(10_000),
  order: z.enum(['asc', 'desc']).default('desc'),
  after: z.string().min(1).max(200).optional(),
})

export const filesRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const { store, fileStorage, config } = deps
  const quota = { maxFiles: config.files.maxFilesPerAccount, maxBytes: config.files.maxBytesPerAccount }

  // Registered here, so only this plugin's routes parse multipart; everything else stays JSON only.
  await app.register(multipart, { limits: MULTIPART_LIMITS })

  const findFile = async (request: FastifyRequest): Promise<StoredFile> => {
    const { id } = request.params as { id: string }
    const file = await store.files.get(request.account.id, id)
    if (file === null) throw fileNotFound(id)
    return file
  }

  app.post('/v1/files', async (request) => {
    if (!request.isMultipart()) {
      throw new GatewayError(
        'unsupported_media_type',
        'POST /v1/files takes multipart/form-data with the parts file and purpose',
      )
    }
    const accountId = request.account.id
    const reservedAt = deps.now()
    const reservation = await store.files.reserve(accountId, quota, reservedAt, UPLOAD_RESERVATION_TTL_MS)
    if (!reservation.ok) {
      drainRequest(request)
      throw reservation.reason === 'files'
        ? new GatewayError(
            'file_limit_exceeded',
            `this account already has ${quota.maxFiles} files, the most it may keep; delete some first`,
          )
        : accountBytesExceeded(quota.maxBytes)
    }

    const maxFileBytes = Math.min(config.files.maxFileBytes, reservation.bytesLeft)
    const tooLarge = (): GatewayError =>
      maxFileBytes < config.files.maxFileBytes
        ? accountBytesExceeded(quota.maxBytes)
        : new GatewayError(
            'payload_too_large',
            `the file is larger than ${config.files.maxFileBytes} bytes, the most one upload may have`,
            { param: 'file' },
          )

    let token: string | undefined = reservation.token
    let stored: StoredObject | undefined
    try {
      let filename = ''
      let declaredType: string | undefined
      let purpose: string | undefined
      let problem: GatewayError | undefined
      // Parts are handled in the order they arrive: the file is streamed to storage as it comes,
      // whether `purpose` came before it (the OpenAI SDKs) or after; a bad purpose then removes it.
      // busboy is allowed one byte more than the limit, so the storage's counter is what refuses it.
      for await (const part of request.parts({
        limits: { ...MULTIPART_LIMITS, fileSize: maxFileBytes + 1 },
      })) {
        if (part.type === 'file') {
          if (part.fieldname !== 'file') {
            part.file.resume()
            problem ??= invalidRequest(
              'invalid_value',
              `unexpected file part "${part.fieldname.slice(0, 100)}": the file goes in the part named file`,
              'file',
            )
            continue
          }
          stored = await fileStorage.write(part.file, { maxBytes: maxFileBytes })
          if (part.file.truncated) throw new FileTooLargeError(maxFileBytes)
          filename = (part.filename || 'file').slice(0, MAX_FILENAME_LENGTH)
          declaredType = part.mimetype
        } else if (
          part.fieldnameTruncated ||
          Buffer.byteLength(part.fieldname) > MULTIPART_LIMITS.fieldNameSize
        ) {
          // busboy does not bound names itself: checked here.
          problem ??= invalidRequest(
            'invalid_value',
            `a form field's name is longer than ${MULTIPART_LIMITS.fieldNameSize} bytes`,
          )
        } else if (part.valueTruncated) {
          problem ??= invalidRequest(
            'invalid_value',
            `form field ${part.fieldname} is longer than ${MULTIPART_LIMITS.fieldSize} bytes`,
            part.fieldname,
          )
        } else if (part.fieldname === 'purpose') {
          purpose = String(part.value)
        } else if (part.fieldname === 'file') {
          problem ??= invalidRequest(
            'invalid_value',
            'file must be a file part with a filename (curl: -F file=@path), not a plain form field',
            'file',
          )
        }
        // Other fields are ignored, as an OpenAI-compatible server may.
      }
      if (problem) throw problem
      if (stored === undefined) throw invalidRequest('missing_field', 'file is required', 'file')
      if (purpose === undefined) throw invalidRequest('missing_field', 'purpose is required', 'purpose')
      if (!(FILE_PURPOSES as readonly string[]).includes(purpose)) {
        throw invalidRequest('invalid_value', `purpose must be one of ${FILE_PURPOSES.join(', ')}`, 'purpose')
      }

      const file: StoredFile = {
        id: newFileId(),
        accountId,
        bytes: stored.bytes,
        createdAt: deps.now(),
        filename,
        purpose: purpose as FilePurpose,
        contentType: toStoredContentType(declaredType, filename),
        storageKey: stored.key,
      }
      const committedAt = deps.now()
      const committed = await store.files.commit(reservation.token, file, quota, committedAt)
      token = undefined
      if (!committed && committedAt >= reservedAt + UPLOAD_RESERVATION_TTL_MS) {
        throw new GatewayError(
          'request_timeout',
          `the upload took longer than ${UPLOAD_RESERVATION_TTL_MS / 60_000} minutes, the most one may take; nothing was kept`,
        )
      }
      if (!committed) throw accountBytesExceeded(quota.maxBytes)
      stored = undefined
      request.log.info({ fileId: file.id, bytes: file.bytes, purpose: file.purpose }, 'file stored')
      return toFileObject(file)
    } catch (err) {
      drainRequest(request)
      throw toUploadError(err, tooLarge)
    } finally {
      if (token !== undefined) await store.files.release(token)
      if (stored !== undefined) {
        const key = stored.key
        await fileStorage.remove(key).catch((err: unknown) => {
          request.log.error({ err, storageKey: key }, 'could not remove a rejected upload')
        })
      }
    }
  })

  app.get('/v1/files', async (request) => {
    const parsed = listQuerySchema.safeParse(request.query ?? {}, { reportInput: true })
    if (!parsed.success) throw fromZodError(parsed.error)
    const q = parsed.data
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
    const file = await store.files.delete(request.account.id, id)
    if (file === null) throw fileNotFound(id)
    await fileStorage.remove(file.storageKey)
    request.log.info({ fileId: file.id }, 'file deleted')
    return { id: file.id, object: 'file' as const, deleted: true }
  })
}

function fileNotFound(id: string): GatewayError {
  return new GatewayError('file_not_found', `no file ${JSON.stringify(id.slice(0, 200))}`)
}

function accountBytesExceeded(maxBytes: number): GatewayError {
  return new GatewayError(
    'payload_too_large',
    `this upload would take the account's files over ${maxBytes} bytes, the most it may keep; delete some first`,
    { param: 'file' },
  )
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

/** @fastify/multipart's errors and busboy's parse errors → the envelope; storage faults stay 500s. */
function toUploadError(err: unknown, tooLarge: () => GatewayError): GatewayError {
  if (err instanceof GatewayError) return err
  if (err instanceof FileTooLargeError) return tooLarge()
  const code = (err as { code?: unknown }).code
  switch (code) {
    case 'FST_REQ_FILE_TOO_LARGE':
      return tooLarge()
    case 'FST_FILES_LIMIT':
      return invalidRequest(
        'invalid_value',
        'send exactly one file per upload, in the part named file',
        'file',
      )
    case 'FST_FIELDS_LIMIT':
    case 'FST_PARTS_LIMIT':
      return invalidRequest(
        'invalid_value',
        `too many form fields: an upload has the parts file and purpose (at most ${MULTIPART_LIMITS.parts} parts)`,
      )
    case 'FST_PROTO_VIOLATION':
      return invalidRequest('invalid_value', 'a form field has a reserved name')
    case 'FST_INVALID_JSON_FIELD_ERROR':
      return invalidRequest('invalid_value', 'a form field declared as application/json is not valid JSON')
    case 'FST_INVALID_MULTIPART_CONTENT_TYPE':
      return new GatewayError('unsupported_media_type', 'expected multipart/form-data')
    case 'FST_MP_PREMATURE_CLOSE':
      return invalidRequest('invalid_value', 'the request ended before the multipart body was complete')
  }
  // busboy's own parse errors are plain Errors; an I/O fault of the storage carries a syscall.
  if (
    err instanceof Error &&
    !('syscall' in err) &&
    /multipart|boundary|terminated early|content-type/i.test(err.message)
  ) {
    return invalidRequest('invalid_value', `malformed multipart body: ${err.message}`)
  }
  return toGatewayError(err)
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
