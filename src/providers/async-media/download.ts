import { Transform, type Readable } from 'node:stream'
import {
  fromNetworkError,
  headerValue,
  malformedUpstream,
  readLimited,
  requestUpstream,
  type UpstreamResponse,
} from '../http.ts'
import { upstreamFault } from '../shared/errors.ts'
import type { MediaCall, OutputSource } from './types.ts'

// Downloading an output file an upstream names by URL (a Replicate delivery URL, an OpenAI image URL).
// The URL comes from the upstream's answer, so it is not trusted with the upstream's key: the key (and
// the provider's configured headers, which may hold secrets too) go only to the configured base URL's
// own origin; any other host gets a bare GET, and only over https, so a plain-http URL cannot send
// the gateway to an internal address. Tests use the fake upstream's origin (plain http, same origin).
// The download is a source: the output keeper opens it and streams the body to storage as it comes,
// with backpressure (the upstream socket is paused while storage is behind), so memory does not grow
// with the output's size.

export function isOnOrigin(url: string, baseUrl: string): boolean {
  try {
    return new URL(url).origin === new URL(baseUrl).origin
  } catch {
    return false
  }
}

/** An output URL the gateway fetches: https anywhere, or anything on the base URL's origin. */
export function isDownloadableOutputUrl(url: string, baseUrl: string): boolean {
  if (isOnOrigin(url, baseUrl)) return true
  try {
    return new URL(url).protocol === 'https:'
  } catch {
    return false
  }
}

/** Redirects followed for one download (Google's file downloads answer 302 to a storage host). */
const MAX_REDIRECTS = 3

/**
 * One output to GET when the keeper opens it: at most `media.maxOutputBytes` (a larger one, declared
 * or streamed, fails with a 502). `auth` (and the provider's configured headers) are sent only when
 * the URL is on the base URL's origin. Redirects are followed by hand, at most three, each hop judged
 * by the same rules, so a redirect cannot carry the key to another host or send the gateway to a
 * plain-http address. A failed download is the upstream's fault (502, retryable). `typeOf` turns the
 * download's Content-Type header (if any) into the output's content type.
 */
export function downloadOutput(
  call: MediaCall,
  url: string,
  auth: Record<string, string>,
  typeOf: (header: string | undefined) => string,
): OutputSource {
  return {
    async open() {
      const res = await requestOutput(call, url, auth)
      const limit = call.media.maxOutputBytes
      const declared = Number(headerValue(res.headers, 'content-length'))
      if (Number.isFinite(declared) && declared > limit) {
        res.body.on('error', () => {}).destroy()
        throw tooLarge(call)
      }
      return {
        stream: limitBody(call, res.body),
        contentType: typeOf(headerValue(res.headers, 'content-type')),
      }
    },
    discard: () => Promise.resolve(),
  }
}

/** The 2xx answer for `url`, redirects followed; its body unread. */
async function requestOutput(
  call: MediaCall,
  url: string,
  auth: Record<string, string>,
): Promise<UpstreamResponse> {
  const { baseUrl, name } = call.upstream
  let target = url
  for (let hop = 0; ; hop++) {
    if (!isDownloadableOutputUrl(target, baseUrl)) {
      throw malformedUpstream(call, 'output URL is neither https nor on the provider origin')
    }
    const own = isOnOrigin(target, baseUrl)
    const via = own ? call : { ...call, upstream: { ...call.upstream, headers: {} } }
    const res = await requestUpstream(via, 'GET', target, own ? auth : {})
    const location = headerValue(res.headers, 'location')
    if (res.status >= 300 && res.status < 400 && location !== undefined) {
      await readLimited(res.body).catch(() => '')
      if (hop >= MAX_REDIRECTS) throw upstreamFault(name, 'output download redirected too often', res.status)
      target = new URL(location, target).href
      continue
    }
    if (res.status < 200 || res.status > 299) {
      await readLimited(res.body).catch(() => '')
      throw upstreamFault(name, `output download failed (${res.status})`, res.status)
    }
    return res
  }
}

function tooLarge(call: MediaCall): Error {
  return malformedUpstream(call, `output larger than ${call.media.maxOutputBytes} bytes`)
}

/**
 * `body` passed on as it is read, failing once more than the limit has come (the rest is not read:
 * the upstream connection is dropped), or with the upstream's error when the body fails. Destroying
 * the result (storage failed) drops the upstream body too.
 */
function limitBody(call: MediaCall, body: Readable): Readable {
  const limit = call.media.maxOutputBytes
  let size = 0
  const out = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      size += chunk.length
      if (size > limit) callback(tooLarge(call))
      else callback(null, chunk)
    },
  })
  body.on('error', (err) => out.destroy(toError(fromNetworkError(err, call))))
  out.on('close', () => body.destroy())
  body.pipe(out)
  return out
}

function toError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err))
}
