import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/** A layer's import bounds, as a no-restricted-imports rule. */
const bounds = (message, ...group) => ({
  'no-restricted-imports': ['error', { patterns: [{ group, message }] }],
});

const GATEWAY_STACK = [
  'slotgate-gateway',
  'slotgate-gateway/*',
  'fastify',
  'pino',
  'prom-client',
  'undici',
  'yaml',
  'commander',
];

export default tseslint.config(
  { ignores: ['**/dist/**', 'node_modules/**', 'bench/results/**', 'test-artifacts/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        URL: 'readonly',
        AbortController: 'readonly',
        AbortSignal: 'readonly',
        fetch: 'readonly',
        Buffer: 'readonly',
        performance: 'readonly',
        structuredClone: 'readonly',
        queueMicrotask: 'readonly',
        setImmediate: 'readonly',
        TextDecoder: 'readonly',
        TextEncoder: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
    },
  },
  // Layering: dependencies point inward. core ← store ← admission ← (the gateway, through the package entry only).
  {
    files: ['packages/slotgate/src/core/**/*.ts'],
    rules: bounds(
      'core is pure logic: it imports nothing outside core and no I/O client',
      '../*',
      'ioredis',
      ...GATEWAY_STACK,
    ),
  },
  {
    files: ['packages/slotgate/src/store/**/*.ts'],
    rules: bounds(
      'the store never imports the admission engine or the gateway',
      '**/admission/**',
      ...GATEWAY_STACK,
    ),
  },
  {
    files: ['packages/slotgate/src/admission/**/*.ts'],
    rules: bounds(
      'admission reaches Redis only through the store interface, and never imports the gateway',
      'ioredis',
      '**/store/redis/**',
      '**/store/memory/**',
      ...GATEWAY_STACK,
    ),
  },
  {
    files: ['packages/slotgate/src/*.ts'],
    rules: bounds('the library never imports the gateway', ...GATEWAY_STACK),
  },
  {
    files: ['packages/gateway/src/**/*.ts'],
    rules: bounds(
      'the gateway uses the library through its public entry (`slotgate`) only',
      '**/slotgate/src/*',
      '**/slotgate/src/**',
      'slotgate/*',
    ),
  },
);
