import type { Readable } from 'node:stream'
import type { Logger } from 'pino'
import { GatewayError, invalidRequest, toGatewayError } from '../errors.ts'
import {
  FILE_PURPOSES,
  type FilePurpose,
  type FileQuota,
  type FileStore,
  type StoredFile,
} from '../store/types.ts'
import { toStoredContentType } from './content-type.ts'
import { newFileId } from '../schemas/files.ts'
import { FileTooLargeError, type FileStorage, type StoredObject } from './storage.ts'

// One upload from start to end, without HTTP (routes/files.ts hands it the multipart parts): hold a
// file slot of the account's quota, stream the file part to storage as it arrives, check the other
// parts, then record the file and free the slot in one step. Whatever goes wrong, nothing is kept:
// the slot is released and the bytes removed.

/** Bounds on the multipart body besides the file size: one file, a few small fields. */
export const MULTIPART_LIMITS = {
  files: 1,
  /** `purpose`, and room for fields OpenAI SDKs may add (`expires_after[…]`), which are ignored. */
  fields: 9,
  /** The file and 9 fields. */
  parts: 10,
  /** Checked here (busboy does not enforce it). */
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

/** A file part as the multipart parser hands it over; `truncated` once more than its limit came. */
export interface UploadFilePart {
  type: 'file'
  fieldname: string
  filename: string
  mimetype: string
  file: Readable & { truncated: boolean }
}

/** A plain form field; the flags say the parser cut its name or its value. */
export interface UploadFieldPart {
  type: 'field'
  fieldname: string
  value: unknown
  fieldnameTruncated: boolean
  valueTruncated: boolean
}

export type UploadPart = UploadFilePart | UploadFieldPart

export interface UploadDeps {
  files: FileStore
  storage: FileStorage
  limits: { maxFileBytes: number; maxFilesPerAccount: number; maxBytesPerAccount: number }
  now: () => number
  log: Logger
}

export interface UploadRequest {
  accountId: string
  /**
   * The body's parts in arrival order, read with a file limit of `fileSize` bytes (the parser may
   * let one byte more through; storage refuses it). Called once, after the quota allowed the upload.
   */
  parts(fileSize: number): AsyncIterable<UploadPart>
  /** Stops reading the body: called before any early answer, so the rest of it is never parsed. */
  drain(): void
}

/** Stores one uploaded file for `r.accountId` and returns its record; throws GatewayErrors. */
export async function uploadFile(d: UploadDeps, r: UploadRequest): Promise<StoredFile> {
  const quota: FileQuota = { maxFiles: d.limits.maxFilesPerAccount, maxBytes: d.limits.maxBytesPerAccount }
  const reservedAt = d.now()
  const reservation = await d.files.reserve(r.accountId, quota, reservedAt, UPLOAD_RESERVATION_TTL_MS)
  if (!reservation.ok) {
    r.drain()
    throw reservation.reason === 'files'
      ? new GatewayError(
          'file_limit_exceeded',
          `this account already has ${quota.maxFiles} files, the most it may keep; delete some first`,
        )
      : accountBytesExceeded(quota.maxBytes)
  }

  const maxFileBytes = Math.min(d.limits.maxFileBytes, reservation.bytesLeft)
  const tooLarge = (): GatewayError =>
    maxFileBytes < d.limits.maxFileBytes
      ? accountBytesExceeded(quota.maxBytes)
      : new GatewayError(
          'payload_too_large',
          `the file is larger than ${d.limits.maxFileBytes} bytes, the most one upload may have`,
          { param: 'file' },
        )

  let token: string | undefined = reservation.token
  let stored: StoredObject | undefined
  try {
    const form = await readParts(r.parts(maxFileBytes + 1), d.storage, maxFileBytes, (s) => {
      stored = s
    })
    const file: StoredFile = {
      id: newFileId(),
      accountId: r.accountId,
      bytes: form.stored.bytes,
      createdAt: d.now(),
      filename: form.filename,
      purpose: form.purpose,
      contentType: toStoredContentType(form.declaredType, form.filename),
      storageKey: form.stored.key,
    }
    const committedAt = d.now()
    const committed = await d.files.commit(reservation.token, file, quota, committedAt)
    token = undefined
    if (!committed && committedAt >= reservedAt + UPLOAD_RESERVATION_TTL_MS) {
      throw new GatewayError(
        'request_timeout',
        `the upload took longer than ${UPLOAD_RESERVATION_TTL_MS / 60_000} minutes, the most one may take; nothing was kept`,
      )
    }
    if (!committed) throw accountBytesExceeded(quota.maxBytes)
    stored = undefined
    return file
  } catch (err) {
    r.drain()
    throw toUploadError(err, tooLarge)
  } finally {
    if (token !== undefined) await d.files.release(token)
    if (stored !== undefined) {
      const key = stored.key
      await d.storage.remove(key).catch((err: unknown) => {
        d.log.error({ err, storageKey: key }, 'could not remove a rejected upload')
      })
    }
  }
}

interface Form {
  stored: StoredObject
  filename: string
  declaredType: string | undefined
  purpose: FilePurpose
}

/**
 * Reads the parts in the order they arrive: the file is streamed to storage as it comes (`onStored`
 * learns its object at once, so a later failure removes it), whether `purpose` came before it (the
 * OpenAI SDKs) or after; a bad purpose then removes it.
 */
async function readParts(
  parts: AsyncIterable<UploadPart>,
  storage: FileStorage,
  maxFileBytes: number,
  onStored: (s: StoredObject) => void,
): Promise<Form> {
  let stored: StoredObject | undefined
  let filename = ''
  let declaredType: string | undefined
  let purpose: string | undefined
  let problem: GatewayError | undefined
  for await (const part of parts) {
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
      stored = await storage.write(part.file, { maxBytes: maxFileBytes })
      onStored(stored)
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
  return { stored, filename, declaredType, purpose: purpose as FilePurpose }
}

function accountBytesExceeded(maxBytes: number): GatewayError {
  return new GatewayError(
    'payload_too_large',
    `this upload would take the account's files over ${maxBytes} bytes, the most it may keep; delete some first`,
    { param: 'file' },
  )
}

/** The multipart parser's errors (@fastify/multipart, busboy) → the envelope; storage faults stay 500s. */
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
