import { afterEach, describe, expect, it, vi } from 'vitest'

// The console's API client (console/lib/api.js, a browser module): a 401 sends the page back to the
// sign-in form only when it answers a call of the current session. A call sent before the last sign-in
// that comes back 401 later (the old session's answer) must not sign the new session out.

interface ApiModule {
  api(path: string, options?: { method?: string; quiet?: boolean }): Promise<unknown>
  setCsrf(token: string): void
  onUnauthorized(fn: (err: Error) => void): void
}

const modulePath = '../../../console/lib/api.js'
const load = async (): Promise<ApiModule> => (await import(/* @vite-ignore */ modulePath)) as ApiModule

/** A fetch whose answers the test releases one by one: each call waits for its `answer`. */
function heldFetch() {
  const pending: ((res: Response) => void)[] = []
  const fetch = vi.fn(() => new Promise<Response>((resolve) => pending.push(resolve)))
  const unauthorized = () =>
    new Response(JSON.stringify({ error: { code: 'session_expired', message: 'session expired' } }), {
      status: 401,
      headers: { 'content-type': 'application/json' },
    })
  return { fetch, pending, unauthorized }
}

/** The client over a held fetch, with a listener of the 401s that sign the page out. */
async function signedOutListener() {
  const held = heldFetch()
  vi.stubGlobal('fetch', held.fetch)
  const { api, setCsrf, onUnauthorized } = await load()
  const heard = vi.fn()
  onUnauthorized(heard)
  return { held, api, setCsrf, heard }
}

afterEach(() => {
  vi.unstubAllGlobals()
  vi.resetModules()
})

describe('the console API client', () => {
  it('signs out on a 401 to a call of the current session', async () => {
    const { held, api, setCsrf, heard } = await signedOutListener()
    setCsrf('session-1')
    const call = api('/v1/generations')
    await vi.waitFor(() => expect(held.pending).toHaveLength(1))
    held.pending[0]!(held.unauthorized())
    await expect(call).rejects.toMatchObject({ status: 401, code: 'session_expired' })
    expect(heard).toHaveBeenCalledTimes(1)
  })

  it('ignores a 401 to a call sent before the last sign-in: it answers the old session', async () => {
    const { held, api, setCsrf, heard } = await signedOutListener()
    setCsrf('session-1')
    const old = api('/v1/generations')
    await vi.waitFor(() => expect(held.pending).toHaveLength(1))
    // The old session expired and the page signed in again before the old call came back.
    setCsrf('')
    setCsrf('session-2')
    held.pending[0]!(held.unauthorized())
    await expect(old).rejects.toMatchObject({ status: 401 })
    expect(heard).not.toHaveBeenCalled()
  })
})
