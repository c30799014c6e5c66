import { lookup as dnsLookup } from 'node:dns/promises'
import { isIP } from 'node:net'
import { GatewayError } from '../errors.ts'

// SSRF rules of docs/design/decisions.md ("Webhooks"): a URL the gateway fetches on a client's behalf (webhooks,
// media inputs) must be https and must not reach the gateway's own host, its network or a cloud
// metadata service. The address check runs on every IP the name resolves to, and safe-fetch.ts then
// connects to the checked IP itself, so a name that changes its answer in between gains nothing.
//
// Addresses are parsed by hand rather than with net.BlockList: the embedded-IPv4 forms (mapped,
// NAT64, 6to4) have to be unpacked and judged by the IPv4 rules, which a range list cannot express.

export interface AddressPolicy {
  /** Local development and tests only: accept http:// URLs. */
  allowHttp: boolean
  /** Local development and tests only: host names (or IP literals) exempt from the address check. */
  allowedHosts: string[]
}

export interface ResolvedAddress {
  address: string
  /** 4 or 6. */
  family: number
}

/** Every address a host name resolves to (dns.lookup with `all: true` by default). */
export type LookupAll = (hostname: string) => Promise<ResolvedAddress[]>

const defaultLookup: LookupAll = (hostname) => dnsLookup(hostname, { all: true })

/** [first address, prefix length] in IPv4 as a 32-bit unsigned number. */
const FORBIDDEN_V4: readonly (readonly [string, number])[] = [
  ['0.0.0.0', 8], // "this network", unspecified: connects to the local host on most systems
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // carrier-grade NAT, shared address space
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, home of the cloud metadata service 169.254.169.254
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation (TEST-NET-1): never a real receiver
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation (TEST-NET-2)
  ['203.0.113.0', 24], // documentation (TEST-NET-3)
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, and 255.255.255.255 broadcast
]

const v4Ranges = FORBIDDEN_V4.map(([first, bits]) => {
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0
  return { base: (parseV4(first)! & mask) >>> 0, mask }
})

/**
 * Whether the gateway must not connect to `ip` (IPv4 dotted quad or IPv6, brackets and zone
 * allowed). Anything that is not an IP address is forbidden: the check fails closed.
 */
export function isForbiddenAddress(ip: string): boolean {
  let s = ip.trim()
  if (s.startsWith('[') && s.endsWith(']')) s = s.slice(1, -1)
  const family = isIP(s)
  if (family === 4) return isForbiddenV4(parseV4(s)!)
  if (family === 6) {
    const groups = parseV6(s)
    return groups === null || isForbiddenV6(groups)
  }
  return true
}

function isForbiddenV4(n: number): boolean {
  return v4Ranges.some(({ base, mask }) => (n & mask) >>> 0 === base)
}

function isForbiddenV6(g: readonly number[]): boolean {
  const [g0, g1, g2, , g4, g5] = g as [number, number, number, number, number, number]
  const low32 = ((g[6]! << 16) | g[7]!) >>> 0
  const zeros = (from: number, to: number): boolean => g.slice(from, to).every((x) => x === 0)

  // ::ffff:a.b.c.d (IPv4-mapped) and ::ffff:0:a.b.c.d (IPv4-translated): a socket to either reaches
  // the IPv4 address, so the IPv4 rules decide.
  if (zeros(0, 5) && g5 === 0xffff) return isForbiddenV4(low32)
  if (zeros(0, 4) && g4 === 0xffff && g5 === 0) return isForbiddenV4(low32)
  // ::/96 holds :: (unspecified), ::1 (loopback) and the deprecated IPv4-compatible form: none is a
  // legitimate public receiver.
  if (zeros(0, 6)) return true
  // NAT64 (RFC 6052): 64:ff9b::a.b.c.d is translated to a.b.c.d by the network's NAT64 gateway.
  if (g0 === 0x64 && g1 === 0xff9b && zeros(2, 6)) return isForbiddenV4(low32)
  // Local-use NAT64 prefix (RFC 8215): the translation target is the operator's choice.
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 1) return true
  // 6to4 (RFC 3056): 2002:a.b.c.d::/48 tunnels to the embedded IPv4 address.
  if (g0 === 0x2002) return isForbiddenV4(((g1 << 16) | g2) >>> 0)
  // Teredo 2001::/32 hides its IPv4 address obfuscated; documentation 2001:db8::/32.
  if (g0 === 0x2001 && (g1 === 0 || g1 === 0xdb8)) return true
  // Discard-only 100::/64.
  if (g0 === 0x100 && zeros(1, 4)) return true
  // Unique-local fc00::/7 (AWS's IPv6 metadata service fd00:ec2::254 is in it).
  if ((g0 & 0xfe00) === 0xfc00) return true
  // Link-local fe80::/10 and the deprecated site-local fec0::/10.
  if ((g0 & 0xffc0) === 0xfe80 || (g0 & 0xffc0) === 0xfec0) return true
  // Multicast ff00::/8.
  if ((g0 & 0xff00) === 0xff00) return true
  return false
}

function parseV4(s: string): number | null {
  const parts = s.split('.')
  if (parts.length !== 4) return null
  let n = 0
  for (const p of parts) {
    if (!/^\d{1,3}$/.test(p)) return null
    const v = Number(p)
    if (v > 255) return null
    n = n * 256 + v
  }
  return n
}

/** Eight 16-bit groups, or null. Accepts `::` compression, a trailing dotted quad and a `%zone`. */
function parseV6(input: string): number[] | null {
  let s = input
  const zone = s.indexOf('%')
  if (zone !== -1) s = s.slice(0, zone)
  const lastColon = s.lastIndexOf(':')
  const quad = s.slice(lastColon + 1)
  if (quad.includes('.')) {
    // A trailing dotted quad is the last two groups written in decimal.
    const v4 = parseV4(quad)
    if (v4 === null) return null
    s = `${s.slice(0, lastColon + 1)}${(v4 >>> 16).toString(16)}:${(v4 & 0xffff).toString(16)}`
  }
  const halves = s.split('::')
  if (halves.length > 2) return null
  const toGroups = (part: string): number[] | null => {
    if (part === '') return []
    const out: number[] = []
    for (const h of part.split(':')) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(h)) return null
      out.push(parseInt(h, 16))
    }
    return out
  }
  const head = toGroups(halves[0]!)
  const rest = halves.length === 2 ? toGroups(halves[1]!) : []
  if (head === null || rest === null) return null
  const known = head.length + rest.length
  if (halves.length === 1) return known === 8 ? head : null
  if (known > 7) return null
  return [...head, ...new Array<number>(8 - known).fill(0), ...rest]
}

/**
 * Parses a client-given URL for a server-side request: https only (http when `allowHttp`), no
 * user:password part, and an IP-literal host must pass the address rules right away (a host name is
 * judged when it is resolved, by `resolveAllowed`). Throws `invalid_value` on `param`.
 */
export function checkUrl(raw: string, policy: AddressPolicy, param: string): URL {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new GatewayError('invalid_value', `${param} must be an absolute URL`, { param })
  }
  const httpOk = policy.allowHttp && url.protocol === 'http:'
  if (url.protocol !== 'https:' && !httpOk) {
    throw new GatewayError('invalid_value', `${param} must be an https:// URL`, { param })
  }
  // Credentials in the URL would be sent to whoever the host is; the URL may also be logged.
  if (url.username !== '' || url.password !== '') {
    throw new GatewayError('invalid_value', `${param} must not contain a user name or password`, { param })
  }
  if (url.hostname === '') throw new GatewayError('invalid_value', `${param} has no host`, { param })
  const literal = ipLiteral(url.hostname)
  if (literal !== null && !isAllowedHost(url.hostname, policy) && isForbiddenAddress(literal)) {
    throw notAllowed(param)
  }
  return url
}

/**
 * The address to connect to for `url`: its IP literal, or what its host name resolves to. Refused
 * with `invalid_value` on `param` when ANY resolved address is forbidden (a name with one public and
 * one private answer is a rebinding setup), unless the host is in `allowedHosts`.
 */
export async function resolveAllowed(
  url: URL,
  policy: AddressPolicy,
  lookup: LookupAll = defaultLookup,
  param = 'url',
): Promise<ResolvedAddress> {
  const allowed = isAllowedHost(url.hostname, policy)
  const literal = ipLiteral(url.hostname)
  if (literal !== null) {
    if (!allowed && isForbiddenAddress(literal)) throw notAllowed(param)
    return { address: literal, family: isIP(literal) }
  }
  let addresses: ResolvedAddress[]
  try {
    addresses = await lookup(url.hostname)
  } catch (err) {
    throw new GatewayError('invalid_value', `${param} host could not be resolved`, { param, cause: err })
  }
  const first = addresses[0]
  if (first === undefined) {
    throw new GatewayError('invalid_value', `${param} host could not be resolved`, { param })
  }
  if (!allowed && addresses.some((a) => isForbiddenAddress(a.address))) throw notAllowed(param)
  return { address: first.address, family: first.family === 6 ? 6 : 4 }
}

function notAllowed(param: string): GatewayError {
  return new GatewayError(
    'invalid_value',
    `${param} points to an address that is not allowed (loopback, private, link-local or metadata)`,
    { param },
  )
}

/** The IP of an IP-literal URL host (`[::1]` → `::1`), else null. */
function ipLiteral(hostname: string): string | null {
  const bare = hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname
  return isIP(bare) === 0 ? null : bare
}

function isAllowedHost(hostname: string, policy: AddressPolicy): boolean {
  if (policy.allowedHosts.length === 0) return false
  const h = hostname.toLowerCase().replace(/\.$/, '')
  const bare = h.startsWith('[') && h.endsWith(']') ? h.slice(1, -1) : h
  return policy.allowedHosts.some((a) => {
    const x = a.toLowerCase().replace(/\.$/, '')
    return x === h || x === bare
  })
}
