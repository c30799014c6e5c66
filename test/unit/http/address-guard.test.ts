import { describe, expect, it } from 'vitest'
import { GatewayError } from '../../../src/errors.ts'
import {
  checkUrl,
  isForbiddenAddress,
  resolveAllowed,
  type AddressPolicy,
  type LookupAll,
} from '../../../src/http/address-guard.ts'
import { thrownGatewayError } from '../../support/errors.ts'

const strict: AddressPolicy = { allowHttp: false, allowedHosts: [] }

/** A resolver that answers from a table and never touches the network. */
const fakeLookup =
  (table: Record<string, string[]>): LookupAll =>
  async (host) => {
    const addresses = table[host]
    if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' })
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }))
  }

async function rejected(p: Promise<unknown>): Promise<GatewayError> {
  try {
    await p
  } catch (err) {
    if (err instanceof GatewayError) return err
    throw err
  }
  throw new Error('expected a GatewayError')
}

describe('isForbiddenAddress', () => {
  it.each([
    ['loopback', ['127.0.0.1', '127.255.255.254', '::1', '0:0:0:0:0:0:0:1']],
    ['unspecified', ['0.0.0.0', '0.1.2.3', '::', '0:0:0:0:0:0:0:0']],
    [
      'private',
      ['10.0.0.1', '10.255.255.255', '172.16.0.1', '172.31.255.255', '192.168.0.1', '192.168.255.255'],
    ],
    ['carrier-grade NAT', ['100.64.0.1', '100.127.255.255']],
    ['link-local', ['169.254.0.1', '169.254.255.255', 'fe80::1', 'febf::1', 'fe80::1%eth0']],
    ['unique-local', ['fc00::1', 'fd12:3456::1', 'fdff:ffff::1']],
    ['multicast', ['224.0.0.1', '239.255.255.250', 'ff02::1', 'ff05::1:3']],
    ['broadcast and reserved', ['255.255.255.255', '240.0.0.1', '250.1.2.3']],
    ['metadata', ['169.254.169.254', 'fd00:ec2::254']],
    ['IETF protocol assignments', ['192.0.0.1', '192.0.0.170']],
    ['benchmarking', ['198.18.0.1', '198.19.255.255']],
    [
      'IPv4-mapped IPv6 of a forbidden IPv4',
      [
        '::ffff:127.0.0.1',
        '::ffff:7f00:1',
        '::ffff:10.0.0.1',
        '::ffff:169.254.169.254',
        '0:0:0:0:0:ffff:c0a8:101',
      ],
    ],
    ['NAT64 of a forbidden IPv4', ['64:ff9b::127.0.0.1', '64:ff9b::a00:1', '64:ff9b::169.254.169.254']],
    ['6to4 of a forbidden IPv4', ['2002:7f00:1::1', '2002:a9fe:a9fe::']],
    ['not an IP address at all', ['', 'localhost', '1.2.3', '1.2.3.256', '::g', '1::2::3', '01.02.03.004x']],
  ])('forbids %s', (_name, addresses) => {
    for (const a of addresses) expect(isForbiddenAddress(a), a).toBe(true)
  })

  it('allows public addresses, including public IPv4 inside mapped or NAT64 IPv6', () => {
    for (const a of [
      '8.8.8.8',
      '1.1.1.1',
      '93.184.216.34',
      '172.15.255.255',
      '172.32.0.0',
      '100.63.255.255',
      '100.128.0.0',
      '192.169.0.1',
      '198.20.0.1',
      '223.255.255.255',
      '2606:4700::1111',
      '2001:4860:4860::8888',
      '2a00:1450:4001:80b::200e',
      '::ffff:8.8.8.8',
      '64:ff9b::8.8.8.8',
      '2002:0808:0808::1',
      '[2606:4700::1111]',
    ]) {
      expect(isForbiddenAddress(a), a).toBe(false)
    }
  })
})

describe('checkUrl', () => {
  it('refuses http by default and accepts it with allowHttp', () => {
    const e = thrownGatewayError(() => checkUrl('http://hooks.example.com/x', strict, 'webhook'))
    expect(e).toMatchObject({ code: 'invalid_value', param: 'webhook' })
    expect(e.message).toMatch(/https/)
    const url = checkUrl('http://hooks.example.com/x', { allowHttp: true, allowedHosts: [] }, 'webhook')
    expect(url.href).toBe('http://hooks.example.com/x')
  })

  it('returns the parsed https URL', () => {
    const url = checkUrl('https://Hooks.Example.com:8443/in?t=1', strict, 'webhook')
    expect(url.hostname).toBe('hooks.example.com')
    expect(url.port).toBe('8443')
  })

  it('refuses other schemes, garbage and user info', () => {
    for (const raw of [
      'ftp://example.com/',
      'file:///etc/passwd',
      'not a url',
      'https://user:pw@example.com/',
      'https://user@example.com/',
    ]) {
      expect(
        thrownGatewayError(() => checkUrl(raw, strict, 'image_url')),
        raw,
      ).toMatchObject({
        code: 'invalid_value',
        param: 'image_url',
      })
    }
  })

  it('refuses forbidden IP-literal hosts at once, however they are written', () => {
    for (const raw of [
      'https://127.0.0.1/',
      'https://10.0.0.1/',
      'https://169.254.169.254/latest/meta-data/',
      'https://[::1]/',
      'https://[::ffff:127.0.0.1]/',
      'https://[fd00:ec2::254]/',
      'https://2130706433/', // 127.0.0.1 as one number
      'https://0x7f.1/',
      'https://0/',
    ]) {
      const e = thrownGatewayError(() => checkUrl(raw, strict, 'webhook'))
      expect(e, raw).toMatchObject({ code: 'invalid_value', param: 'webhook' })
      expect(e.message).toMatch(/not allowed/)
    }
  })

  it('lets allowedHosts exempt an IP literal', () => {
    const policy = { allowHttp: true, allowedHosts: ['127.0.0.1', '::1'] }
    expect(checkUrl('http://127.0.0.1:9/', policy, 'webhook').hostname).toBe('127.0.0.1')
    expect(checkUrl('https://[::1]/', policy, 'webhook').hostname).toBe('[::1]')
  })
})

describe('resolveAllowed', () => {
  it('returns the address a public name resolves to', async () => {
    const lookup = fakeLookup({ 'hooks.example.com': ['93.184.216.34', '2606:2800:220:1::248'] })
    const url = checkUrl('https://hooks.example.com/', strict, 'webhook')
    await expect(resolveAllowed(url, strict, lookup)).resolves.toEqual({
      address: '93.184.216.34',
      family: 4,
    })
  })

  it('refuses a name resolving to loopback', async () => {
    const lookup = fakeLookup({ 'evil.example.com': ['127.0.0.1'] })
    const url = checkUrl('https://evil.example.com/', strict, 'webhook')
    const e = await rejected(resolveAllowed(url, strict, lookup, 'webhook'))
    expect(e).toMatchObject({ code: 'invalid_value', param: 'webhook' })
    expect(e.message).toMatch(/not allowed/)
  })

  it('refuses when any one of the answers is forbidden', async () => {
    const lookup = fakeLookup({ 'mixed.example.com': ['93.184.216.34', '10.1.2.3'] })
    const url = checkUrl('https://mixed.example.com/', strict, 'webhook')
    await expect(rejected(resolveAllowed(url, strict, lookup))).resolves.toMatchObject({
      code: 'invalid_value',
    })
  })

  it('refuses the real localhost with the default resolver', async () => {
    const url = checkUrl('https://localhost/', strict, 'webhook')
    const e = await rejected(resolveAllowed(url, strict, undefined, 'webhook'))
    expect(e.message).toMatch(/not allowed/)
  })

  it('lets allowedHosts exempt a name', async () => {
    const lookup = fakeLookup({ 'hooks.test': ['127.0.0.1'] })
    const policy = { allowHttp: false, allowedHosts: ['hooks.test'] }
    const url = checkUrl('https://hooks.test/', policy, 'webhook')
    await expect(resolveAllowed(url, policy, lookup)).resolves.toEqual({ address: '127.0.0.1', family: 4 })
    await expect(resolveAllowed(url, strict, lookup)).rejects.toBeInstanceOf(GatewayError)
  })

  it('refuses a name that does not resolve', async () => {
    const url = checkUrl('https://nowhere.test/', strict, 'webhook')
    const e = await rejected(resolveAllowed(url, strict, fakeLookup({}), 'webhook'))
    expect(e).toMatchObject({ code: 'invalid_value', param: 'webhook' })
    expect(e.message).toMatch(/resolved/)
  })

  it('checks IP literals without resolving them', async () => {
    const lookup: LookupAll = async () => {
      throw new Error('must not resolve')
    }
    await expect(resolveAllowed(new URL('https://8.8.8.8/'), strict, lookup)).resolves.toEqual({
      address: '8.8.8.8',
      family: 4,
    })
    await expect(resolveAllowed(new URL('https://[2606:4700::1111]/'), strict, lookup)).resolves.toEqual({
      address: '2606:4700::1111',
      family: 6,
    })
    await expect(rejected(resolveAllowed(new URL('https://[::1]/'), strict, lookup))).resolves.toBeInstanceOf(
      GatewayError,
    )
  })
})
