import { headerValue, malformedUpstream, readBytes, readLimited, requestUpstream } from '../http.ts'
import { upstreamFault } from '../shared/errors.ts'
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

/** Redirects followed for one download (Google's file downloads answer 302 to a storage host). */
const MAX_REDIRECTS = 3

/**
 * GETs one output, at most `media.maxOutputBytes` (a larger one is a 502). `auth` (and the provider's
 * configured headers) are sent only when the URL is on the base URL's origin. Redirects are followed
 * by hand, at most three, each hop judged by the same rules, so a redirect cannot carry the key to
 * another host or send the gateway to a plain-http address. A failed download is the upstream's
 * fault (502, retryable).
 */
export async function downloadOutput(
  call: MediaCall,
  url: string,
  auth: Record<string, string>,
): Promise<DownloadedOutput> {
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
    const data = await readBytes(call, res.body, call.media.maxOutputBytes)
    return { data, contentType: headerValue(res.headers, 'content-type') }
  }
}
