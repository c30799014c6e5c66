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

/** Where every screenshot goes: a temp dir (CONSOLE_SCREENSHOTS_ALL overrides). */
export function screenshotDir(): string {
  const dir = resolve(process.env.CONSOLE_SCREENSHOTS_ALL ?? join(tmpdir(), 'junction-console-screenshots'))
  mkdirSync(dir, { recursive: true })
  return dir
}

/**
 * Where the documentation's screenshots are written too, when set (`npm run screenshots` sets
 * docs/images): only the ones docs/console.md shows.
 */
export function docsScreenshotDir(): string | undefined {
  const dir = process.env.CONSOLE_SCREENSHOTS_DIR
  if (!dir) return undefined
  mkdirSync(resolve(dir), { recursive: true })
  return resolve(dir)
}

/** The screenshots docs/console.md shows. */
export const DOC_SHOTS = new Set([
  'console-sign-in-phone.png',
  'console-overview-desktop.png',
  'console-overview-phone.png',
  'console-overview-dark-desktop.png',
  'console-generation-desktop.png',
  'console-predictions-desktop.png',
  'console-keys-desktop.png',
  'console-admin-account-desktop.png',
  'console-admin-deployments-desktop.png',
])

export const DESKTOP = { width: 1280, height: 800 }
export const PHONE = { width: 360, height: 740 }
