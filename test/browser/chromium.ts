import { existsSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { chromium, type Browser } from 'playwright-core'

// Debian's chromium package, driven by playwright-core: no browser is downloaded. Missing, the browser
// tests fail with this message instead of passing without it.

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `the browser tests need Chromium at ${CHROMIUM} (Debian: apt-get install chromium; or set CHROMIUM_PATH)`,
    )
  }
  // Playwright gives every launch a fresh temporary profile (user-data-dir) and removes it on close.
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      // The audio preview is started by the test, not by a click of a person.
      '--autoplay-policy=no-user-gesture-required',
    ],
  })
}

/** Where screenshots go: CONSOLE_SCREENSHOTS_DIR (npm run screenshots: docs/images), else a temp dir. */
export function screenshotDir(): string {
  const dir = process.env.CONSOLE_SCREENSHOTS_DIR
    ? resolve(process.env.CONSOLE_SCREENSHOTS_DIR)
    : join(tmpdir(), 'junction-console-screenshots')
  mkdirSync(dir, { recursive: true })
  return dir
}

export const DESKTOP = { width: 1280, height: 800 }
export const PHONE = { width: 360, height: 740 }
