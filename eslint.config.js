import js from '@eslint/js'
import tseslint from 'typescript-eslint'

export default tseslint.config(
  { ignores: ['node_modules/', 'coverage/', 'data/', 'reports/', '.stryker-tmp/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-console': ['error', { allow: ['error'] }],
    },
  },
  {
    files: ['bench/**', 'test/**', 'scripts/**'],
    rules: { 'no-console': 'off' },
  },
  // The console's browser modules: plain ES modules, the browser's globals.
  {
    files: ['console/**/*.js'],
    languageOptions: {
      sourceType: 'module',
      globals: Object.fromEntries(
        [
          'window',
          'document',
          'location',
          'history',
          'fetch',
          'getComputedStyle',
          'ResizeObserver',
          'Node',
          'URLSearchParams',
          'Intl',
          'queueMicrotask',
        ].map((name) => [name, 'readonly']),
      ),
    },
  },
)
