// The media type kept with an upload: it is served back by the content endpoint and goes into the
// data URLs sent upstream, which decide by it (an upstream rejects an image or PDF sent as
// application/octet-stream).

const mediaTypePattern = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$/

const byExtension: Record<string, string> = {
  pdf: 'application/pdf',
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  heic: 'image/heic',
  heif: 'image/heif',
  txt: 'text/plain',
  md: 'text/markdown',
  csv: 'text/csv',
  html: 'text/html',
  json: 'application/json',
  jsonl: 'application/jsonl',
  xml: 'application/xml',
  mp3: 'audio/mpeg',
  wav: 'audio/wav',
  mp4: 'video/mp4',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  xlsx: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
  pptx: 'application/vnd.openxmlformats-officedocument.presentationml.presentation',
}

const GENERIC = 'application/octet-stream'

/**
 * The upload's declared type when it is a well-formed specific one; otherwise a guess from the file
 * name's extension (clients that know nothing better send application/octet-stream); otherwise
 * application/octet-stream. Parameters (`; charset=…`) are dropped.
 */
export function toStoredContentType(declared: string | undefined, filename: string): string {
  const type = declared?.split(';')[0]?.trim().toLowerCase() ?? ''
  if (mediaTypePattern.test(type) && type !== GENERIC) return type
  return mediaTypeOfName(filename) ?? GENERIC
}

/** The media type a file name's (or URL path's) extension tells, or undefined. */
export function mediaTypeOfName(name: string | undefined): string | undefined {
  const ext = /\.([A-Za-z0-9]{1,10})$/.exec(name?.split(/[?#]/)[0] ?? '')?.[1]?.toLowerCase()
  return ext === undefined ? undefined : byExtension[ext]
}

/** The image type from the first bytes (PNG, JPEG, GIF, WebP), or undefined. */
export function sniffImageType(head: Uint8Array): string | undefined {
  const starts = (...bytes: number[]): boolean => bytes.every((b, i) => head[i] === b)
  if (starts(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) return 'image/png'
  if (starts(0xff, 0xd8, 0xff)) return 'image/jpeg'
  if (starts(0x47, 0x49, 0x46, 0x38)) return 'image/gif'
  if (starts(0x52, 0x49, 0x46, 0x46) && head[8] === 0x57 && head[9] === 0x45 && head[10] === 0x42) {
    return head[11] === 0x50 ? 'image/webp' : undefined
  }
  return undefined
}
