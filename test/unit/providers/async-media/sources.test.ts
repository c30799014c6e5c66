import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFfmpeg } from '../../../../src/providers/async-media/ffmpeg.ts'
import { buffersSource } from '../../../../src/providers/async-media/sources.ts'
import type { OutputSource } from '../../../../src/providers/async-media/types.ts'

// Output sources: bytes already in memory in parts are streamed as they are (never joined into one
// more buffer), and ffmpeg's output is a stream that fails when ffmpeg does.

async function chunksOf(src: OutputSource): Promise<Buffer[]> {
  const { stream } = await src.open()
  const out: Buffer[] = []
  for await (const c of stream as AsyncIterable<Buffer>) out.push(c)
  return out
}

describe('buffersSource', () => {
  it('streams the parts in order, each as it is (no concatenated copy)', async () => {
    const head = Buffer.from('RIFF')
    const body = randomBytes(1000)
    const chunks = await chunksOf(buffersSource([head, body]))
    expect(chunks).toHaveLength(2)
    expect(chunks[1]!.buffer).toBe(body.buffer)
  })
})

describe('startFfmpeg', () => {
  it("streams ffmpeg's output as it is produced, in many chunks", async () => {
    // 20 s of a 440 Hz tone as raw PCM: 20 * 48000 * 2 bytes, written by ffmpeg to stdout.
    const src = await startFfmpeg(
      ['-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000:duration=20', '-f', 's16le', 'pipe:1'],
      { path: 'ffmpeg', what: 'test' },
    )
    const chunks = await chunksOf(src)
    expect(chunks.reduce((a, c) => a + c.length, 0)).toBe(20 * 48_000 * 2)
    expect(chunks.length).toBeGreaterThan(1)
    for (const c of chunks) expect(c.length).toBeLessThanOrEqual(1024 * 1024)
  })

  it('an ffmpeg that fails before its first byte (an encoder its build lacks) rejects at start', async () => {
    await expect(
      startFfmpeg(['-f', 's16le', '-i', 'pipe:0', '-c:a', 'no-such-codec', '-f', 'mp3', 'pipe:1'], {
        path: 'ffmpeg',
        what: 'audio encoding',
        input: Buffer.alloc(4800),
      }),
    ).rejects.toMatchObject({ code: 'internal_error', message: 'audio encoding failed' })
  })

  it('one that fails after its first bytes fails the stream: no truncated file passes for whole', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'junction-ffmpeg-'))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    const broken = join(dir, 'ffmpeg')
    writeFileSync(broken, '#!/bin/sh\nprintf ID3partial\necho "encoder crashed" >&2\nexit 3\n', {
      mode: 0o755,
    })
    const src = await startFfmpeg(['-i', 'pipe:0', 'pipe:1'], { path: broken, what: 'audio encoding' })
    await expect(chunksOf(src)).rejects.toMatchObject({
      code: 'internal_error',
      message: 'audio encoding failed',
      cause: new Error('encoder crashed'),
    })
  })

  it('a missing executable rejects at start, naming how to fix it', async () => {
    await expect(
      startFfmpeg(['-version'], { path: '/nonexistent/ffmpeg', what: 'audio encoding' }),
    ).rejects.toMatchObject({ code: 'internal_error', message: expect.stringContaining('ffmpeg not found') })
  })

  it('discarding an unread source kills ffmpeg', async () => {
    // ffmpeg behind a wrapper that tells its pid (exec keeps it), producing 10 minutes of sound.
    const dir = mkdtempSync(join(tmpdir(), 'junction-ffmpeg-'))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    const wrapper = join(dir, 'ffmpeg')
    writeFileSync(wrapper, `#!/bin/sh\necho $$ > ${join(dir, 'pid')}\nexec ffmpeg "$@"\n`, { mode: 0o755 })
    const src = await startFfmpeg(['-f', 'lavfi', '-i', 'sine=duration=600', '-f', 's16le', 'pipe:1'], {
      path: wrapper,
      what: 'test',
    })
    let pid = 0
    while (pid === 0) {
      pid = Number(readFileSync(join(dir, 'pid'), { encoding: 'utf8', flag: 'a+' }).trim() || 0)
      await new Promise((r) => setImmediate(r))
    }
    await src.discard()
    // Gone once the kill is delivered (waited for, not timed).
    for (;;) {
      try {
        process.kill(pid, 0)
      } catch {
        break
      }
      await new Promise((r) => setTimeout(r, 10))
    }
  })
})
