// The console's one way to the API: same-origin fetch with the session cookie, the CSRF token (kept
// in memory only) on every state-changing call, and errors in the gateway's envelope as ApiError.

let csrf = ''
/** Counts the sessions this page has had: every sign-in and sign-out sets the CSRF token anew. */
let epoch = 0
export const setCsrf = (token) => {
  csrf = token ?? ''
  epoch += 1
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message)
    this.status = status
    this.code = code
  }
}

const listeners = new Set()
/**
 * Called with the ApiError of a 401 to a call made in the current session: the page goes back to the
 * sign-in form. A 401 to a call sent before the last sign-in or sign-out is the old session's answer,
 * arriving late: it must not sign the new session out.
 */
export const onUnauthorized = (fn) => listeners.add(fn)

export async function api(path, { method = 'GET', body, quiet = false } = {}) {
  const sentIn = epoch
  const headers = { accept: 'application/json' }
  if (body !== undefined) headers['content-type'] = 'application/json'
  if (method !== 'GET' && method !== 'HEAD') headers['x-csrf-token'] = csrf
  let res
  try {
    res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
      cache: 'no-store',
    })
  } catch {
    throw new ApiError(
      0,
      'network_error',
      'The gateway could not be reached. Check the connection and try again.',
    )
  }
  const isJson = (res.headers.get('content-type') ?? '').includes('json')
  const data = isJson ? await res.json().catch(() => null) : null
  if (!res.ok) {
    const e = data?.error ?? {}
    const err = new ApiError(res.status, e.code ?? 'error', e.message ?? res.statusText)
    if (res.status === 401 && !quiet && sentIn === epoch) for (const fn of listeners) fn(err)
    throw err
  }
  return data
}

/** What to tell the reader about a failed call. */
export function describeError(err) {
  if (!(err instanceof ApiError)) return `Something went wrong: ${err?.message ?? err}`
  switch (err.status) {
    case 401:
      return err.code === 'session_expired'
        ? 'Your session has expired. Sign in again.'
        : `You are not signed in (${err.message}).`
    case 403:
      return `Not allowed: ${err.message}`
    case 404:
      return `Not found: ${err.message}`
    case 429:
      return `Too many requests: ${err.message}`
    case 503:
      return `The gateway is unavailable right now (${err.message}). Try again in a moment.`
    default:
      return err.status === 0 ? err.message : `${err.message} (${err.status})`
  }
}
