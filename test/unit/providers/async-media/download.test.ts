import { describe, expect, it } from 'vitest'
import { isDownloadableOutputUrl, isOnOrigin } from '../../../../src/providers/async-media/download.ts'

// Which output URLs the gateway fetches, and which get the upstream's key.

describe('output URL rules', () => {
  const base = 'https://api.replicate.com'

  it('the key goes only to the base URL origin (scheme, host and port)', () => {
    expect(isOnOrigin('https://api.replicate.com/v1/files/abc', base)).toBe(true)
    expect(isOnOrigin('https://replicate.delivery/xezq/out.webp', base)).toBe(false)
    expect(isOnOrigin('http://api.replicate.com/v1/files/abc', base)).toBe(false)
    expect(isOnOrigin('https://api.replicate.com:8443/x', base)).toBe(false)
    expect(isOnOrigin('not a url', base)).toBe(false)
  })

  it('fetches https anywhere and anything on the base origin, nothing else', () => {
    expect(isDownloadableOutputUrl('https://replicate.delivery/xezq/out.webp', base)).toBe(true)
    expect(isDownloadableOutputUrl('http://127.0.0.1:9/out.png', 'http://127.0.0.1:9/v1')).toBe(true)
    expect(isDownloadableOutputUrl('http://127.0.0.1:10/out.png', 'http://127.0.0.1:9/v1')).toBe(false)
    expect(isDownloadableOutputUrl('http://169.254.169.254/latest/meta-data', base)).toBe(false)
    expect(isDownloadableOutputUrl('file:///etc/passwd', base)).toBe(false)
    expect(isDownloadableOutputUrl('data:image/png;base64,AAAA', base)).toBe(false)
  })
})
