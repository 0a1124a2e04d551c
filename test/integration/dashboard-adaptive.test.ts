/**
 * /dashboard in a real browser (headless Debian Chromium driven by playwright-core): an adaptive channel's chart draws
 * its limit over time against its slots in use and the upstream's 429s; a plain channel's chart has neither.
 * A screenshot is kept in test-artifacts/dashboard-adaptive.png.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { parseConfig } from '../../packages/gateway/src/config.js';
import { createGateway } from '../../packages/gateway/src/server.js';
import { useCleanups } from '../helpers/cleanups.js';

const CHROMIUM = '/usr/bin/chromium';
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const ADMIN = 'adm-dash-adaptive-S3CRET';
const CLIENT = 'tok-dash-adaptive-S3CRET';

let browser: Browser;
beforeAll(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `${CHROMIUM} not found: the dashboard test drives Debian's Chromium (apt-get install -y chromium); .ci/run installs it`,
    );
  }
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
    ],
  });
});
afterAll(async () => {
  await browser?.close();
});

const cleanups = useCleanups();
const POLL = { timeout: 10_000, interval: 100 };

/** The chart of a channel: its series' polylines (name → points as [x, y]), its bars, and its legend. */
function channelChart(page: Page, id: string) {
  return page.$eval(`#channel-charts figure[data-channel="${id}"]`, (figure) => ({
    title: figure.querySelector('figcaption > span')?.textContent ?? '',
    legend: figure.querySelector('.legend')?.textContent ?? '',
    lines: [...figure.querySelectorAll('polyline')].map((l) => ({
      series: l.getAttribute('data-series') ?? '',
      points: (l.getAttribute('points') ?? '')
        .trim()
        .split(/\s+/)
        .filter(Boolean)
        .map((p: string) => p.split(',').map(Number)),
    })),
    bars: [...figure.querySelectorAll('rect')].map((r) => r.getAttribute('data-series') ?? ''),
  }));
}

describe('GET /dashboard, adaptive limits', () => {
  it(
    'draws an adaptive channel’s limit against its slots in use and its upstream 429s',
    { timeout: 60_000 },
    async () => {
      const config = parseConfig(
        {
          server: { host: '127.0.0.1', port: 0, drain_timeout_ms: 1000 },
          admin: { token: ADMIN },
          tokens: [{ key: CLIENT, name: 'dashboard-adaptive' }],
          channels: [
            // every answer a 429: the first lowers the limit from 4 to its floor of 1
            {
              id: 'ad',
              type: 'mock',
              models: ['m-ad'],
              max_concurrency: 4,
              adaptive: { min_concurrency: 1 },
              mock: { latency_ms: 0, chunks: 1, error_rate: 1, error_status: 429 },
            },
            { id: 'plain', type: 'mock', models: ['m-plain'], max_concurrency: 3, mock: { latency_ms: 0 } },
          ],
          settings: { wait_enabled: false, retry_times: 0 },
        },
        'dashboard-adaptive-test',
        {},
      );
      const gw = await createGateway({ config, logger: false, history: { intervalMs: 250, points: 240 } });
      const base = await gw.listen();
      cleanups.push(() => gw.close());
      const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
      cleanups.push(() => context.close());
      const page = await context.newPage();
      const errors: string[] = [];
      page.on('pageerror', (err) => errors.push(err.message));
      page.on('console', (msg) => {
        if (msg.type() === 'error') errors.push(msg.text());
      });
      await page.goto(`${base}/dashboard#token=${ADMIN}`);

      // Before any request: the limit is the max, drawn as a line of its own.
      const limitLine = async () =>
        (await channelChart(page, 'ad')).lines.find((l) => l.series === 'limit')?.points ?? [];
      await expect.poll(async () => (await limitLine()).length, POLL).toBeGreaterThanOrEqual(2);
      const before = await channelChart(page, 'ad');
      expect(before.title).toBe('ad (adaptive)');
      expect(before.legend).toMatch(/^in use 0\s*limit 4\s*max 4\s*upstream 429\/s 0$/);
      expect(before.bars).toEqual([]);

      const res = await fetch(`${base}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${CLIENT}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm-ad', messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(res.status).toBe(429);
      await res.arrayBuffer();

      // The limit falls to 1: the line steps down (SVG y grows downwards), and the 429 has its bar.
      await expect.poll(async () => (await channelChart(page, 'ad')).legend, POLL).toMatch(/limit 1\s*max 4/);
      const after = await channelChart(page, 'ad');
      const points = after.lines.find((l) => l.series === 'limit')!.points;
      expect(points.at(-1)![1]).toBeGreaterThan(points[0]![1]!);
      await expect.poll(async () => (await channelChart(page, 'ad')).bars, POLL).toContain('upstream 429/s');
      expect(after.lines.map((l) => l.series)).toEqual(expect.arrayContaining(['in use', 'limit', 'max']));

      // A channel without `adaptive`: in use against max, as ever.
      const plain = await channelChart(page, 'plain');
      expect(plain.title).toBe('plain');
      expect(plain.legend).toMatch(/^in use 0\s*max 3$/);
      expect(new Set(plain.lines.map((l) => l.series))).toEqual(new Set(['in use', 'max']));
      expect(plain.bars).toEqual([]);
      await mkdir(`${ROOT}test-artifacts`, { recursive: true });
      await page
        .locator('#history-card')
        .screenshot({ path: `${ROOT}test-artifacts/dashboard-adaptive.png` });
      expect(errors).toEqual([]);
    },
  );
});
