/**
 * The SDK-retries burst of docs/benchmark.md: a fresh gateway (in-process store) with one `mock` channel of
 * max_concurrency 1, max_waiting 4, wait_timeout_ms 400 and the mock's default 200 ms latency; `--calls` concurrent
 * chat completions through the official openai SDK with its default 2 retries; `--runs` bursts, one gateway each.
 *
 *   npx tsx --conditions=slotgate-source bench/sdk-retries.ts [--runs 5] [--calls 20]
 */
import { parseArgs } from 'node:util';
import { createGateway, parseConfig } from 'slotgate-gateway';
import { runSdkBurst, summarize, type BurstSummary } from './sdk-burst.js';

interface Row extends BurstSummary {
  elapsedMs: number;
}

const TOKEN = 'bench-sdk-token';
const MODEL = 'burst';

async function oneBurst(calls: number): Promise<Row> {
  const config = parseConfig(
    {
      server: { host: '127.0.0.1', port: 0, log_level: 'silent' },
      tokens: [{ key: TOKEN, name: 'bench' }],
      channels: [
        {
          id: 'one',
          type: 'mock',
          models: [MODEL],
          max_concurrency: 1,
          max_waiting: 4,
          mock: { latency_ms: 200 },
        },
      ],
      settings: { wait_timeout_ms: 400 },
    },
    'bench:sdk-retries',
  );
  const gateway = await createGateway({ config, logger: false });
  try {
    const url = await gateway.listen();
    const result = await runSdkBurst({ baseURL: `${url}/v1`, apiKey: TOKEN, model: MODEL, calls });
    return { ...summarize(result), elapsedMs: result.elapsedMs };
  } finally {
    await gateway.close();
  }
}

const { values } = parseArgs({
  options: { runs: { type: 'string', default: '5' }, calls: { type: 'string', default: '20' } },
});
const rows: Row[] = [];
for (let i = 0; i < Number(values.runs); i++) rows.push(await oneBurst(Number(values.calls)));
console.log(
  'run  attempts  429s  retries  max/100ms  share  succeeded  elapsed-s  distinct-ms  retry-after values',
);
rows.forEach((r, i) =>
  console.log(
    [
      String(i + 1).padEnd(4),
      String(r.attempts).padStart(8),
      String(r.rejected).padStart(5),
      String(r.retries).padStart(8),
      String(r.maxRetriesIn100ms).padStart(10),
      r.maxShareIn100ms.toFixed(2).padStart(6),
      String(r.succeeded).padStart(10),
      (r.elapsedMs / 1000).toFixed(1).padStart(10),
      String(r.distinctRetryAfterMs).padStart(12),
      ' ' + JSON.stringify(r.retryAfterValues),
    ].join(' '),
  ),
);
