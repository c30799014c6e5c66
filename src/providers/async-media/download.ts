import { headerValue, malformedUpstream, readBytes } from '../http.ts'
import { upstreamFault } from '../shared/errors.ts'
import { requestChecked } from '../shared/upstream.ts'
import type { MediaCall } from './types.ts'

// Downloading an output file an upstream names by URL (a Replicate delivery URL, an OpenAI image URL).
// The URL comes from the upstream's answer, so it is not trusted with the upstream's key: the key (and
// the provider's configured headers, which may hold secrets too) go only to the configured base URL's
// own origin; any other host gets a bare GET, and only over https, so a plain-http URL cannot send
// the gateway to an internal address. Tests use the fake upstream's origin (plain http, same origin).

export interface DownloadedOutput {
  data: Buffer
  /** The download's Content-Type header, if any. */
  contentType: string | undefined
}

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

/**
 * GETs one output, at most `media.maxOutputBytes` (a larger one is a 502). `auth` is sent only when
 * the URL is on the base URL's origin. A failed download is the upstream's fault (502, retryable).
 */
export async function downloadOutput(
  call: MediaCall,
  url: string,
  auth: Record<string, string>,
): Promise<DownloadedOutput> {
  const { baseUrl, name } = call.upstream
  if (!isDownloadableOutputUrl(url, baseUrl)) {
    throw malformedUpstream(call, 'output URL is neither https nor on the provider origin')
  }
  const own = isOnOrigin(url, baseUrl)
  const target = own ? call : { ...call, upstream: { ...call.upstream, headers: {} } }
  const res = await requestChecked(target, 'GET', url, own ? auth : {}, undefined, (_p, status) =>
    upstreamFault(name, `output download failed (${status})`, status),
  )
  const data = await readBytes(call, res.body, call.media.maxOutputBytes)
  return { data, contentType: headerValue(res.headers, 'content-type') }
}
