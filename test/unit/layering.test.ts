/**
 * The import bounds between layers (eslint.config.js) fire: each forbidden import below is reported by ESLint with
 * the repository's own configuration, and an allowed one is not.
 */
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const eslint = new ESLint({ cwd: new URL('../..', import.meta.url).pathname });

async function restricted(filePath: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath });
  return result!.messages.filter((m) => m.ruleId === 'no-restricted-imports').map((m) => m.message);
}

const lib = 'packages/slotgate/src';

describe('layering', () => {
  it.each([
    [`${lib}/core/x.ts`, `import { RedisStore } from '../store/redis/redis-store.js';`],
    [`${lib}/core/x.ts`, `import { createAdmission } from '../admission/admission.js';`],
    [`${lib}/core/x.ts`, `import { Redis } from 'ioredis';`],
    [`${lib}/store/x.ts`, `import { LoadView } from '../admission/loads/load-view.js';`],
    [`${lib}/store/redis/x.ts`, `import type { Engine } from '../../admission/engine.js';`],
    [`${lib}/admission/pass/x.ts`, `import { RedisStore } from '../../store/redis/redis-store.js';`],
    [`${lib}/admission/x.ts`, `import { Redis } from 'ioredis';`],
    [`${lib}/admission/x.ts`, `import Fastify from 'fastify';`],
    [`${lib}/index.ts`, `export { createGateway } from 'slotgate-gateway';`],
    [
      'packages/gateway/src/x.ts',
      `import { LeaseManager } from '../../slotgate/src/admission/leases/lease-manager.js';`,
    ],
    ['packages/gateway/src/x.ts', `import { KeyBuilder } from 'slotgate/store';`],
  ])('%s may not: %s', async (file, code) => {
    expect(await restricted(file, code)).toHaveLength(1);
  });

  it.each([
    [`${lib}/core/x.ts`, `import { SettingsError } from './errors.js';`],
    [`${lib}/store/x.ts`, `import { within } from '../core/clock.js';`],
    [`${lib}/admission/x.ts`, `import type { SlotStore } from '../store/store.js';`],
    ['packages/gateway/src/x.ts', `import { createAdmission } from 'slotgate';`],
  ])('%s may: %s', async (file, code) => {
    expect(await restricted(file, code)).toEqual([]);
  });
});
