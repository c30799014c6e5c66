import { defineConfig } from 'vitest/config'

// `npm run test:mutation` (Stryker) runs the unit and contract tests only: they are what must notice a
// changed cost formula or admission rule, and the integration tests' processes would make each of the
// several hundred mutant runs take seconds.
export default defineConfig({
  test: {
    include: ['test/unit/**/*.test.ts'],
    testTimeout: 20_000,
    hookTimeout: 20_000,
    pool: 'forks',
  },
})
