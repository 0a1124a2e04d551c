/**
 * The tests' bounded poll (test/helpers/until.ts): it resolves with the first truthy answer, retries a check that
 * throws, and a timeout names what was awaited and why the last try failed.
 */
import { describe, expect, it } from 'vitest';
import { until } from '../helpers/until.js';

describe('until', () => {
  it('resolves with the first truthy answer, past checks that threw', async () => {
    let calls = 0;
    const value = await until(
      () => {
        if (++calls < 3) throw new Error(`not yet ${calls}`);
        return calls === 3 ? { calls } : undefined;
      },
      'the third call',
      { intervalMs: 1 },
    );
    expect(value).toEqual({ calls: 3 });
  });

  it('a timeout says what was awaited and keeps the last error as its cause', async () => {
    let calls = 0;
    const error = await until(
      () => {
        throw new Error(`refused ${++calls}`);
      },
      'the store answering',
      { timeoutMs: 20, intervalMs: 1 },
    ).catch((e: unknown) => e as Error);
    expect(error.message).toBe(`the store answering: not within 20 ms (last error: refused ${calls})`);
    expect((error.cause as Error).message).toBe(`refused ${calls}`);
  });

  it('a timeout with no error says only what was awaited', async () => {
    await expect(until(() => false, 'never', { timeoutMs: 5, intervalMs: 1 })).rejects.toThrow(
      /^never: not within 5 ms$/,
    );
  });
});
