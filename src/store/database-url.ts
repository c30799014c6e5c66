/**
 * A database URL as logs and start-up lines show it: the password (in the authority or as a
 * `password` parameter) replaced by `***`. A URL that does not parse is not shown at all, since
 * nothing tells where its password would be.
 */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url)
    if (u.password !== '') u.password = '***'
    if (u.searchParams.has('password')) u.searchParams.set('password', '***')
    return u.toString()
  } catch {
    return '(unparseable database URL)'
  }
}
