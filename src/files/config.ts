import { z } from 'zod'

// The uploaded files' slice of the config: the file's `files` block (GATEWAY_ variables override it).

export interface FilesConfig {
  /** Directory of uploaded files (created on first upload). */
  dir: string
  /** Largest single upload (413 above). */
  maxFileBytes: number
  maxFilesPerAccount: number
  maxBytesPerAccount: number
  /** Most file bytes inlined into one chat request by file references (413 above). */
  maxInlineBytesPerRequest: number
  /** Stored bytes no record points at are removed once older than this (a crash mid-upload). */
  orphanGraceMs: number
}

/** The config file's `files` block. */
export const filesSchema = z
  .object({
    dir: z.string().min(1).optional().describe('Directory of uploaded files (created on the first upload).'),
    maxFileBytes: z.number().int().positive().optional().describe('Largest single upload (413 above).'),
    maxFilesPerAccount: z
      .number()
      .int()
      .positive()
      .optional()
      .describe('Files one account may keep (400 `file_limit_exceeded` past it).'),
    maxBytesPerAccount: z
      .number()
      .int()
      .positive()
      .optional()
      .describe('Bytes one account may keep (413 past it).'),
    maxInlineBytesPerRequest: z
      .number()
      .int()
      .positive()
      .optional()
      .describe('Most file bytes inlined into one chat request by file references (413 above).'),
    orphanGraceMs: z
      .number()
      .int()
      .min(60_000)
      .optional()
      .describe('Stored bytes no record points at are removed once older than this (a crash mid-upload).'),
  })
  .strict()
  .default({})
  .describe('Uploaded files.')

/** The files settings the environment gives, over the file's. */
export type FilesEnv = Partial<Omit<FilesConfig, 'orphanGraceMs'>>

export function resolveFiles(f: z.infer<typeof filesSchema>, env: FilesEnv): FilesConfig {
  return {
    dir: env.dir ?? f.dir ?? './data/files',
    maxFileBytes: env.maxFileBytes ?? f.maxFileBytes ?? 512 * 1024 * 1024,
    maxFilesPerAccount: env.maxFilesPerAccount ?? f.maxFilesPerAccount ?? 10_000,
    maxBytesPerAccount: env.maxBytesPerAccount ?? f.maxBytesPerAccount ?? 10 * 1024 ** 3,
    maxInlineBytesPerRequest: env.maxInlineBytesPerRequest ?? f.maxInlineBytesPerRequest ?? 32 * 1024 * 1024,
    orphanGraceMs: f.orphanGraceMs ?? 60 * 60_000,
  }
}
