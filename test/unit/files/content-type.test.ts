import { describe, expect, it } from 'vitest'
import { sniffImageType, toStoredContentType } from '../../../src/files/content-type.ts'
import { newFileId, toFileObject } from '../../../src/schemas/files.ts'

describe('toStoredContentType', () => {
  it('keeps a specific declared type, without parameters', () => {
    expect(toStoredContentType('application/pdf', 'x.bin')).toBe('application/pdf')
    expect(toStoredContentType('Text/CSV; charset=utf-8', 'x')).toBe('text/csv')
  })

  it('guesses from the extension when the client declared nothing useful', () => {
    expect(toStoredContentType('application/octet-stream', 'report.PDF')).toBe('application/pdf')
    expect(toStoredContentType(undefined, 'cat.jpeg')).toBe('image/jpeg')
    expect(toStoredContentType('application/octet-stream', 'data.jsonl')).toBe('application/jsonl')
    expect(toStoredContentType('application/octet-stream', 'archive.xyz')).toBe('application/octet-stream')
  })

  it('never keeps a malformed type (it ends up in a response header and a data URL)', () => {
    expect(toStoredContentType('text/html\r\nx-evil: 1', 'a.txt')).toBe('text/plain')
    expect(toStoredContentType('nonsense', 'a')).toBe('application/octet-stream')
  })
})

describe('sniffImageType', () => {
  it('recognises PNG, JPEG, GIF and WebP by their first bytes', () => {
    expect(sniffImageType(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))).toBe('image/png')
    expect(sniffImageType(Buffer.from([0xff, 0xd8, 0xff, 0xe0]))).toBe('image/jpeg')
    expect(sniffImageType(Buffer.from('GIF89a'))).toBe('image/gif')
    expect(sniffImageType(Buffer.from('RIFF\0\0\0\0WEBPVP8 '))).toBe('image/webp')
    expect(sniffImageType(Buffer.from('RIFF\0\0\0\0WAVEfmt '))).toBeUndefined()
    expect(sniffImageType(Buffer.from('%PDF-1.7'))).toBeUndefined()
  })
})

describe('file objects', () => {
  it('has ids of file- and 24 url-safe random characters', () => {
    const ids = new Set(Array.from({ length: 100 }, newFileId))
    expect(ids.size).toBe(100)
    for (const id of ids) expect(id).toMatch(/^file-[A-Za-z0-9_-]{24}$/)
  })

  it('shows the File object of docs/design/api-contract.md, created_at in seconds', () => {
    expect(
      toFileObject({
        id: 'file-x',
        accountId: 'a',
        bytes: 3,
        createdAt: 1_700_000_000_999,
        filename: 'a.txt',
        purpose: 'assistants',
        contentType: 'text/plain',
        storageKey: 'k',
      }),
    ).toEqual({
      id: 'file-x',
      object: 'file',
      bytes: 3,
      created_at: 1_700_000_000,
      filename: 'a.txt',
      purpose: 'assistants',
      status: 'processed',
    })
  })
})
