import { GatewayError, invalidRequest } from '../errors.ts'
import { isKnownContentPart, type ChatMessage, type ChatRequest } from '../providers/types.ts'
import type { FileStore, StoredFile } from '../store/types.ts'
import { sniffImageType } from './content-type.ts'
import { fileIdPattern } from '../schemas/files.ts'
import { StorageObjectNotFoundError, type FileStorage } from './storage.ts'

// docs/design/decisions.md, chat file references: `{"type":"file","file":{"file_id":"file-…"}}` and an
// `image_url.url` that is a `file-…` id name the caller's own uploads. Upstreams do not know our ids,
// so the content is inlined the way the OpenAI chat API takes it: a file part with `file_data` as a
// base64 data URL (https://platform.openai.com/docs/guides/pdf-files), an image part with a data URL.
// Translators for other protocols turn those inline forms into their own.

export interface FileReferenceContext {
  accountId: string
  files: FileStore
  storage: FileStorage
  /** The most file bytes (before base64) inlined into one request. */
  maxInlineBytes: number
  /** Runs before the first file is looked up (a request's deferred pre-body admission). */
  beforeReads?: () => Promise<void>
}

interface Reference {
  message: number
  part: number
  id: string
  /** Where the id is, for the error: `messages[1].content[0].file.file_id`. */
  param: string
}

/**
 * Returns the request with every file reference replaced by the file's content, or the request itself
 * when it has none. An unknown id, or another account's, is a 400 naming the message part; more than
 * `maxInlineBytes` in total is a 413. The input is not modified.
 */
export async function resolveFileReferences(
  req: ChatRequest,
  ctx: FileReferenceContext,
): Promise<ChatRequest> {
  const refs = findReferences(req.messages)
  if (refs.length === 0) return req
  await ctx.beforeReads?.()

  const records = new Map<string, StoredFile>()
  let total = 0
  for (const ref of refs) {
    let file = records.get(ref.id)
    if (file === undefined) {
      const found = await ctx.files.get(ctx.accountId, ref.id)
      if (found === null) throw unknownFile(ref)
      file = found
      records.set(ref.id, file)
    }
    // Counted per reference: a file referenced twice is sent twice.
    total += file.bytes
    if (total > ctx.maxInlineBytes) {
      throw new GatewayError(
        'payload_too_large',
        `${ref.param}: the files referenced in this request total more than ${ctx.maxInlineBytes} bytes, the most that can be sent with one request`,
        { param: ref.param },
      )
    }
  }

  const contents = new Map<string, { base64: string; head: Buffer }>()
  for (const ref of refs) {
    if (contents.has(ref.id)) continue
    const file = records.get(ref.id)!
    let bytes: Buffer
    try {
      bytes = await ctx.storage.read(file.storageKey)
    } catch (err) {
      // Deleted between the lookup and the read.
      if (err instanceof StorageObjectNotFoundError) throw unknownFile(ref)
      throw err
    }
    contents.set(ref.id, { base64: bytes.toString('base64'), head: bytes.subarray(0, 16) })
  }

  const messages = req.messages.slice()
  for (const ref of refs) {
    const file = records.get(ref.id)!
    const { base64, head } = contents.get(ref.id)!
    const message = messages[ref.message]!
    // findReferences found a part array here, and a file or image part at ref.part.
    if (!Array.isArray(message.content)) continue
    const content = message.content.slice()
    const part = content[ref.part]
    if (part === undefined || !isKnownContentPart(part)) continue
    if (part.type === 'file') {
      const { file_id: _id, ...given } = part.file
      content[ref.part] = {
        ...part,
        file: {
          ...given,
          filename: given.filename ?? file.filename,
          file_data: `data:${file.contentType};base64,${base64}`,
        },
      }
    } else if (part.type === 'image_url') {
      const type = file.contentType.startsWith('image/') ? file.contentType : sniffImageType(head)
      if (type === undefined) {
        throw invalidRequest(
          'invalid_value',
          `${ref.param}: file ${ref.id} is not an image (${file.contentType})`,
          ref.param,
        )
      }
      content[ref.part] = { ...part, image_url: { ...part.image_url, url: `data:${type};base64,${base64}` } }
    }
    messages[ref.message] = { ...message, content }
  }
  return { ...req, messages }
}

function findReferences(messages: ChatMessage[]): Reference[] {
  const refs: Reference[] = []
  messages.forEach((m, i) => {
    if (!Array.isArray(m.content)) return
    m.content.forEach((p, j) => {
      if (!isKnownContentPart(p)) return
      if (p.type === 'file') {
        const id = p.file.file_id
        if (id !== undefined) {
          refs.push({
            message: i,
            part: j,
            id,
            param: `messages[${i}].content[${j}].file.file_id`,
          })
        }
      } else if (p.type === 'image_url') {
        const url = p.image_url.url
        if (url.startsWith('file-')) {
          refs.push({
            message: i,
            part: j,
            id: url,
            param: `messages[${i}].content[${j}].image_url.url`,
          })
        }
      }
    })
  })
  return refs
}

function unknownFile(ref: Reference): GatewayError {
  const what = fileIdPattern.test(ref.id)
    ? `no file ${ref.id}`
    : `${JSON.stringify(ref.id.slice(0, 64))} is not a file id`
  return invalidRequest('invalid_value', `${ref.param}: ${what}`, ref.param)
}
