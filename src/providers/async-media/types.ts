import type { Readable } from 'node:stream'
import type { UpstreamCall } from '../types.ts'
import type { BillableUsage } from '../../domain/prices.ts'
import type { JsonValue, MediaInput, MediaKind } from '../../domain/media.ts'

// Asynchronous media generation (predictions): one interface every media upstream speaks. The task
// runner (predictions/runner.ts) calls `submit` once, then `poll` with the state `submit` or the previous
// `poll` returned until the job is done or failed; `cancel` when the client cancels. The state is
// JSON: it is stored with the task, so another instance (or this one after a restart) can continue.

/** One task as an adapter sees it. */
export type MediaJob = MediaInput & {
  /** The prediction's id (32 hex): usable as an idempotency key upstream. */
  taskId: string
  /** The model id the upstream knows. */
  upstreamModel: string
}

/**
 * The bytes of an output that are not in hand: a download, an encoder's output, a rendered file.
 * The output keeper (predictions/outputs.ts) opens it once and streams it to storage as it comes, so no
 * output is ever whole in memory. Opened (or discarded) right after the step that made it.
 */
export interface OutputSource {
  /**
   * The bytes as a stream, which fails when they turn out bad (larger than the limit, cut off, an
   * encoder error). `contentType` when only the opened source knows it (a download's header).
   */
  open(): Promise<{ stream: Readable; contentType?: string }>
  /** Frees what the source holds (a running encoder, a temporary file) when it is not opened. */
  discard(): Promise<void>
}

/** One finished output. */
export interface MediaOutput {
  type: MediaKind
  /** `image/png`, `video/mp4`, `audio/mpeg`, `audio/wav`, `audio/ogg`, … (a source may refine it). */
  contentType: string
  /**
   * In hand when the bytes are in memory anyway (an image an upstream answered inline in base64,
   * the mock's PNGs); otherwise a source the keeper streams to storage.
   */
  data: Buffer | OutputSource
}

export interface MediaResult {
  outputs: MediaOutput[]
  /** What to bill, in the units the model's price is given in (images by tier, video seconds, …). */
  usage: BillableUsage
}

export type MediaStep =
  /** Not finished: call `poll` again later with this state. */
  | { state: 'pending'; job: JsonValue }
  | { state: 'done'; result: MediaResult }
  /**
   * The upstream says the job failed (a final answer, not a network error: those are thrown).
   * `billed` when the upstream charged for it anyway (then `usage` says what).
   */
  | { state: 'failed'; code: string; message: string; billed?: BillableUsage }

/** What a media adapter gets besides the upstream: the gateway's own tools, passed in (tests fake them). */
export interface MediaTools {
  /** The ffmpeg executable that encodes audio (async-media/audio.ts). */
  ffmpegPath: string
  /** Largest output file accepted from an upstream (bytes). */
  maxOutputBytes: number
  /**
   * Downloads a media URL the client gave (`image_urls`, `first_frame_url`, …) under docs/design/decisions.md's
   * address rules (no loopback, private, link-local or metadata addresses; no redirects), for
   * upstreams that take the bytes rather than the URL. At most `maxOutputBytes`.
   */
  fetchUserMedia(url: string, signal: AbortSignal): Promise<{ data: Buffer; contentType: string }>
}

/** One call of a media adapter: the upstream as for chat, plus the tools. */
export type MediaCall = UpstreamCall & { media: MediaTools }

export interface MediaAdapter {
  /**
   * Starts the job. A synchronous upstream (OpenAI images) answers `done` at once. A submit that
   * failed after the request may have reached the upstream is not repeated (the task fails), unless
   * `idempotentSubmit`.
   */
  submit(job: MediaJob, call: MediaCall): Promise<MediaStep>
  /** The submit carries an idempotency key (the task id) the upstream honours: repeating it is safe. */
  idempotentSubmit?: boolean
  /** Asks how the job started by `submit` is doing. */
  poll(job: MediaJob, state: JsonValue, call: MediaCall): Promise<MediaStep>
  /** Cancels the upstream job where the upstream can; absent when it cannot. */
  cancel?(job: MediaJob, state: JsonValue, call: MediaCall): Promise<void>
}
