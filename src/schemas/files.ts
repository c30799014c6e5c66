import { randomBytes } from 'node:crypto'
import type { FilePurpose, StoredFile } from '../store/types.ts'

/** The File object of docs/design/api-contract.md. */
export interface FileObject {
  id: string
  object: 'file'
  bytes: number
  created_at: number
  filename: string
  purpose: FilePurpose
  status: 'processed'
}

/** docs/design/decisions.md: `file-` + 24 crypto-random url-safe characters (144 bits). */
export function newFileId(): string {
  return `file-${randomBytes(18).toString('base64url')}`
}

/** A string that has the form of a file id (an `image_url.url` of this form is a file reference). */
export const fileIdPattern = /^file-[A-Za-z0-9_-]{1,128}$/

export function toFileObject(f: StoredFile): FileObject {
  return {
    id: f.id,
    object: 'file',
    bytes: f.bytes,
    created_at: Math.floor(f.createdAt / 1000),
    filename: f.filename,
    purpose: f.purpose,
    status: 'processed',
  }
}
