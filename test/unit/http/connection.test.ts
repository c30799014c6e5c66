import { EventEmitter } from 'node:events'
import type { IncomingMessage } from 'node:http'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { createLingerSlots, watchBody, type BodyStall } from '../../../src/http/connection.ts'

// watchBody with fake timers and a fake request: the socket's byte count is what it watches.

function fakeRequest() {
  const raw = new EventEmitter() as EventEmitter & {
    complete: boolean
    socket: { bytesRead: number; destroyed: boolean }
  }
  raw.complete = false
  raw.socket = { bytesRead: 0, destroyed: false }
  return raw
}

beforeEach(() => {
  vi.useFakeTimers()
})
afterEach(() => {
  vi.useRealTimers()
})

describe('watchBody', () => {
  const watch = { idleMs: 60_000, minBytesPerSecond: 1_000, windowMs: 1_000, now: () => Date.now() }

  it('cuts a body arriving slower than the floor once a window has passed', () => {
    const raw = fakeRequest()
    const stalls: BodyStall[] = []
    watchBody(raw as unknown as IncomingMessage, watch, (s) => stalls.push(s))
    // 100 bytes every 250 ms: 400 B/s, under 1000 B/s.
    for (let i = 0; i < 3; i++) {
      raw.socket.bytesRead += 100
      vi.advanceTimersByTime(250)
    }
    expect(stalls).toEqual([])
    raw.socket.bytesRead += 100
    vi.advanceTimersByTime(250)
    expect(stalls).toEqual([{ reason: 'slow', bytes: 400, ms: 1_000 }])
    // Once only.
    vi.advanceTimersByTime(5_000)
    expect(stalls).toHaveLength(1)
  })

  it('lets a body at or above the floor go on, and judges only the last window', () => {
    const raw = fakeRequest()
    const stalls: BodyStall[] = []
    watchBody(raw as unknown as IncomingMessage, watch, (s) => stalls.push(s))
    // A fast first second, then 300 bytes every 250 ms (1200 B/s) for nine seconds.
    raw.socket.bytesRead += 50_000
    for (let i = 0; i < 40; i++) {
      vi.advanceTimersByTime(250)
      raw.socket.bytesRead += 300
    }
    expect(stalls).toEqual([])
    // Then it slows down: the fast start does not cover for it.
    for (let i = 0; i < 4; i++) {
      vi.advanceTimersByTime(250)
      raw.socket.bytesRead += 10
    }
    expect(stalls).toHaveLength(1)
    expect(stalls[0]).toMatchObject({ reason: 'slow' })
  })

  it('stops when the body is complete, and still cuts a silent one after idleMs', () => {
    const done = fakeRequest()
    const stalls: BodyStall[] = []
    watchBody(done as unknown as IncomingMessage, watch, (s) => stalls.push(s))
    done.complete = true
    vi.advanceTimersByTime(10_000)
    expect(stalls).toEqual([])

    const silent = fakeRequest()
    watchBody(silent as unknown as IncomingMessage, { ...watch, minBytesPerSecond: 0, idleMs: 400 }, (s) =>
      stalls.push(s),
    )
    vi.advanceTimersByTime(399)
    expect(stalls).toEqual([])
    vi.advanceTimersByTime(101)
    expect(stalls).toEqual([{ reason: 'idle', ms: 400 }])
  })
})

describe('createLingerSlots', () => {
  it('bounds the lingering connections of each key, and frees a slot on release', () => {
    const slots = createLingerSlots(2)
    expect(slots.take('a')).toBe(true)
    expect(slots.take('a')).toBe(true)
    expect(slots.take('a')).toBe(false)
    expect(slots.take('b')).toBe(true)
    slots.release('a')
    expect(slots.count('a')).toBe(1)
    expect(slots.take('a')).toBe(true)
    slots.release('b')
    expect(slots.count('b')).toBe(0)
  })
})
