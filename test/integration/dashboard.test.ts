/**
 * /dashboard in a real browser (headless Debian Chromium driven by playwright-core) against a listening gateway on
 * the test Redis, under traffic. It asserts what a person sees: the channel rows, "2 / 2" and a full bar while two
 * streams hold a channel's slots (and the bar back at 0 once they end), a cooldown counting down in seconds, the same
 * numbers as GET /admin/channels, admissions/s and Redis commands/s once traffic runs, this instance in the list, the
 * history charts filling with points, the fleet view of two gateways on one Redis, and on the embedded store the
 * first render's known figures with the Redis-only cards hidden.
 * A screenshot is kept in test-artifacts/dashboard.png (SLOTGATE_UPDATE_DOCS_SCREENSHOT=1 also writes docs/).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { copyFile, mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { chromium, type Browser, type Page } from 'playwright-core';
import { parseConfig } from '../../packages/gateway/src/config.js';
import { createGateway, type Gateway } from '../../packages/gateway/src/server.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';
import { RedisServer } from '../helpers/redis-server.js';
import { useCleanups } from '../helpers/cleanups.js';

const CHROMIUM = '/usr/bin/chromium';
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const ARTIFACT = `${ROOT}test-artifacts/dashboard.png`;

const SECRETS = {
  admin: 'adm-dash-S3CRET-70e1',
  client: 'tok-dash-S3CRET-2aa9',
  channelKey: 'sk-dash-S3CRET-f00d',
} as const;
const CLIENT = { authorization: `Bearer ${SECRETS.client}`, 'content-type': 'application/json' };
const ADMIN = { authorization: `Bearer ${SECRETS.admin}`, 'content-type': 'application/json' };

const CHANNELS = [
  // Two long streams hold both slots of `busy` for as long as the test keeps them open.
  {
    id: 'busy',
    type: 'mock',
    models: ['m-busy'],
    priority: 10,
    max_concurrency: 2,
    mock: { latency_ms: 0, chunks: 400, chunk_delay_ms: 50 },
  },
  { id: 'cool', type: 'mock', models: ['m-cool'], max_concurrency: 3, mock: { latency_ms: 5, chunks: 1 } },
  {
    id: 'steady',
    type: 'mock',
    models: ['m-steady'],
    max_concurrency: 4,
    mock: { latency_ms: 15, chunks: 1 },
  },
  { id: 'free', type: 'mock', models: ['m-free'], max_concurrency: 0, mock: { latency_ms: 1, chunks: 1 } },
  {
    id: 'real-off',
    type: 'openai',
    base_url: 'http://127.0.0.1:9/v1',
    key: SECRETS.channelKey,
    models: ['m-off'],
    max_concurrency: 5,
    enabled: false,
  },
] as const;

const LAUNCH_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

let browser: Browser;
beforeAll(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `${CHROMIUM} not found: the dashboard test drives Debian's Chromium (apt-get install -y chromium); .ci/run installs it`,
    );
  }
  browser = await chromium.launch({ executablePath: CHROMIUM, args: LAUNCH_ARGS });
});
afterAll(async () => {
  await browser?.close();
});

const cleanups = useCleanups();

/** The history sampled every 250 ms over 60 points (a 15 s window), so charts fill while a test runs. */
const HISTORY = { intervalMs: 250, points: 60 };

/**
 * A listening gateway on `url`'s Redis (`memory`: the embedded store, no redis section); gateways given the same
 * prefix on one Redis share their slots.
 */
async function startGateway(
  url = redisUrl(),
  prefix = uniquePrefix('dash'),
): Promise<{ gw: Gateway; base: string }> {
  const config = parseConfig(
    {
      server: { host: '127.0.0.1', port: 0, drain_timeout_ms: 1000 },
      ...(url === 'memory' ? {} : { redis: { url, prefix, timeout_ms: 300 } }),
      admin: { token: SECRETS.admin },
      tokens: [{ key: SECRETS.client, name: 'dashboard-test', client: 'dash-team', max_concurrency: 8 }],
      channels: CHANNELS,
      settings: { wait_enabled: false, retry_times: 0 },
    },
    'dashboard-test',
    {},
  );
  const gw = await createGateway({ config, logger: false, history: HISTORY });
  const base = await gw.listen();
  cleanups.push(async () => {
    await gw.close();
    if (url !== redisUrl()) return; // the embedded store, or a private server: its data goes with it
    const redis = new Redis(url);
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  });
  return { gw, base };
}

async function openPage(
  url: string,
  onPage: (page: Page) => Promise<unknown> | void = () => {},
): Promise<{ page: Page; errors: string[] }> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  cleanups.push(() => context.close());
  const page = await context.newPage();
  await onPage(page);
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(err.message));
  page.on('console', (msg) => {
    if (msg.type() === 'error') errors.push(msg.text());
  });
  await page.goto(url);
  return { page, errors };
}

function chatBody(model: string, stream = false): string {
  return JSON.stringify({ model, stream, messages: [{ role: 'user', content: 'hi' }] });
}

/** A streamed request that holds its slot until `stop()` (or the stream's natural end, far beyond the test). */
async function holdStream(base: string, model: string): Promise<() => Promise<void>> {
  const controller = new AbortController();
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: CLIENT,
    body: chatBody(model, true),
    signal: controller.signal,
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const drained = (async () => {
    try {
      for (;;) if ((await reader.read()).done) return;
    } catch {
      // aborted
    }
  })();
  return async () => {
    controller.abort();
    await drained;
  };
}

/** Sequential requests until stopped: admissions, load reads and acquire calls while the page watches. */
function backgroundTraffic(base: string): { stop: () => Promise<number> } {
  let running = true;
  let sent = 0;
  const loop = (async () => {
    while (running) {
      const res = await fetch(`${base}/v1/chat/completions`, {
        method: 'POST',
        headers: CLIENT,
        body: chatBody(sent % 3 === 2 ? 'm-free' : 'm-steady'),
      });
      await res.arrayBuffer();
      sent++;
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return sent;
    },
  };
}

interface Row {
  channel: string;
  inUse: string;
  barWidth: string;
  barFull: boolean;
  peak: string;
  waiting: string;
  cooldown: string;
}

function readRows(page: Page): Promise<Row[]> {
  return page.$$eval('#channels tbody tr', (trs) =>
    trs.map((tr) => {
      const cells = tr.querySelectorAll('td');
      const bar = tr.querySelector('.bar');
      return {
        channel: tr.getAttribute('data-channel') ?? '',
        inUse: tr.querySelector('.in-use')?.textContent ?? '',
        // the inline style the page set (the target width; the rendered one animates towards it)
        barWidth: (bar?.querySelector('span') as { style: { width: string } } | null)?.style.width ?? '',
        barFull: bar?.classList.contains('full') ?? false,
        peak: cells[2]?.textContent ?? '',
        waiting: cells[3]?.textContent ?? '',
        cooldown: cells[5]?.textContent ?? '',
      };
    }),
  );
}

/** How many points the chart's lines hold (every polyline matching `selector`). */
function pointsIn(page: Page, selector: string): Promise<number> {
  return page.$$eval(selector, (lines) =>
    lines.reduce(
      (n, l) => n + (l.getAttribute('points') ?? '').trim().split(/\s+/).filter(Boolean).length,
      0,
    ),
  );
}

/** The fleet view's row of a channel: instance id → slots shown. */
function fleetRow(page: Page, channel: string): Promise<Record<string, string>> {
  return page.$$eval(`#fleet tr[data-fleet-channel="${channel}"] td[data-instance]`, (cells) =>
    Object.fromEntries(cells.map((td) => [td.getAttribute('data-instance') ?? '', td.textContent ?? ''])),
  );
}

/** The page refreshes every second (slower while Redis is down: the status read waits for it): poll generously. */
const POLL = { timeout: 10_000, interval: 100 };

const rowOf = async (page: Page, id: string) => (await readRows(page)).find((r) => r.channel === id)!;
const textOf = (page: Page, selector: string) => page.locator(selector).innerText();
const numberIn = (text: string) => Number(text.replace(/,/g, ''));

interface AdminChannel {
  id: string;
  max_concurrency: number;
  active: number;
  waiting: number;
  cooling: boolean;
  cooldown_remaining_ms: number;
}

async function adminChannels(base: string): Promise<AdminChannel[]> {
  const res = await fetch(`${base}/admin/channels`, { headers: ADMIN });
  return ((await res.json()) as { channels: AdminChannel[] }).channels;
}

/** Differences between the page's rows and the admin API (cooldowns may differ by a refresh's worth). */
function mismatches(rows: Row[], api: AdminChannel[]): string[] {
  const out: string[] = [];
  if (rows.map((r) => r.channel).join() !== api.map((c) => c.id).join()) out.push('channel list');
  for (const c of api) {
    const row = rows.find((r) => r.channel === c.id);
    if (!row) continue;
    const inUse = c.max_concurrency > 0 ? `${c.active} / ${c.max_concurrency}` : `${c.active} / unlimited`;
    if (row.inUse !== inUse) out.push(`${c.id} in use: page ${row.inUse}, api ${inUse}`);
    if (row.waiting !== String(c.waiting)) out.push(`${c.id} waiting: page ${row.waiting}, api ${c.waiting}`);
    const width = c.max_concurrency > 0 ? (100 * c.active) / c.max_concurrency : 0;
    if (row.barWidth !== `${width}%`) out.push(`${c.id} bar: page ${row.barWidth}, api ${width}%`);
    if (c.cooling) {
      const shown = /^(\d+) s$/.exec(row.cooldown);
      const seconds = Math.ceil(c.cooldown_remaining_ms / 1000);
      if (!shown || Math.abs(Number(shown[1]) - seconds) > 2)
        out.push(`${c.id} cooldown: page ${row.cooldown}, api ${seconds} s`);
    } else if (row.cooldown !== '—') out.push(`${c.id} cooldown: page ${row.cooldown}, api none`);
  }
  return out;
}

describe('GET /dashboard in a browser', () => {
  it('shows live slots, cooldowns and rates that match the admin API', { timeout: 60_000 }, async () => {
    const { gw, base } = await startGateway();
    const { page, errors } = await openPage(`${base}/dashboard#token=${SECRETS.admin}`);

    // Signed in from the URL fragment, which is then dropped from the address bar.
    await expect.poll(() => page.locator('#main').isVisible(), POLL).toBe(true);
    expect(page.url()).toBe(`${base}/dashboard`);
    await expect
      .poll(async () => (await readRows(page)).map((r) => r.channel), POLL)
      .toEqual(CHANNELS.map((c) => c.id));
    expect(await rowOf(page, 'busy')).toMatchObject({ inUse: '0 / 2', barWidth: '0%', barFull: false });
    // The store's topology and its one node, as /admin/status reports them.
    // (textContent: the card title is upper-cased by CSS)
    await expect.poll(() => page.locator('#redis-topology').textContent(), POLL).toBe('· single');
    expect(await textOf(page, '#redis-nodes tbody tr td:first-child')).toBe(new URL(redisUrl()).host);
    expect(await textOf(page, '#redis-nodes tbody tr td:nth-child(3)')).toBe('up');
    expect((await rowOf(page, 'free')).inUse).toBe('0 / unlimited');
    expect(await textOf(page, '#channels tbody tr[data-channel="real-off"] td:first-child')).toBe(
      'real-off (disabled)',
    );
    // (polled: the once-a-second refresh replaces the rows, and a box asked for while its row goes is null)
    let emptyBar: { width: number } | null = null;
    await expect
      .poll(async () => {
        emptyBar = await page.locator('tr[data-channel="busy"] .bar > span').boundingBox();
        return emptyBar !== null;
      }, POLL)
      .toBe(true);

    // A cooldown set by an operator, and two streams that fill `busy`.
    const cooled = await fetch(`${base}/admin/channels/cool/cooldown`, {
      method: 'POST',
      headers: ADMIN,
      body: JSON.stringify({ seconds: 120 }),
    });
    expect(cooled.status).toBe(200);
    const streams = [await holdStream(base, 'm-busy'), await holdStream(base, 'm-busy')];
    cleanups.push(async () => {
      for (const stop of streams) await stop();
    });
    // A third request finds both slots taken and waiting off: the gateway's own 429.
    const turnedAway = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: CLIENT,
      body: chatBody('m-busy'),
    });
    expect(turnedAway.status).toBe(429);
    await turnedAway.arrayBuffer();
    const traffic = backgroundTraffic(base);
    cleanups.push(async () => void (await traffic.stop()));

    await expect.poll(async () => (await rowOf(page, 'busy')).inUse, POLL).toBe('2 / 2');
    // The token's client (a limit of 8): its two streams, and at most one request of the background traffic, count
    const clientRow = 'tr[data-client="dash-team"]';
    await expect.poll(() => page.locator('#clients-card').isVisible(), POLL).toBe(true);
    expect(await textOf(page, `${clientRow} td:nth-child(2)`)).toBe('dashboard-test');
    await expect.poll(async () => textOf(page, `${clientRow} .in-use`), POLL).toMatch(/^[23] \/ 8$/);
    const full = await rowOf(page, 'busy');
    expect(full.barWidth).toBe('100%');
    expect(full.barFull).toBe(true);
    // The bar itself grew on screen (after its CSS transition), to the width of its track.
    const track = await page.locator('tr[data-channel="busy"] .bar').boundingBox();
    await expect
      .poll(
        async () => (await page.locator('tr[data-channel="busy"] .bar > span').boundingBox())!.width,
        POLL,
      )
      .toBeCloseTo(track!.width, 0);
    expect(emptyBar!.width).toBeLessThan(1);

    // The cooldown shows in seconds, counting down from 120.
    // (polled: the row shows the remaining seconds once a refresh has read the cooldown through the load view)
    await expect.poll(async () => (await rowOf(page, 'cool')).cooldown, POLL).toMatch(/^\d+ s$/);
    const cooling = await rowOf(page, 'cool');
    const seconds = Number(/^(\d+) s$/.exec(cooling.cooldown)?.[1]);
    expect(seconds).toBeGreaterThan(100);
    expect(seconds).toBeLessThanOrEqual(120);
    expect(await page.locator('tr[data-channel="cool"] td.cooling').count()).toBe(1);

    // Rates and ratios appear once traffic runs (the first refresh has nothing to compare with): wait until the page
    // has seen the 429 and a good part of the background traffic, then read what it shows.
    await expect
      .poll(
        async () => Number(/^since start: 1 of (\d+)/.exec(await textOf(page, '#ratio-detail'))?.[1] ?? 0),
        POLL,
      )
      .toBeGreaterThanOrEqual(12);
    await expect.poll(async () => numberIn(await textOf(page, '#adm-rate')), POLL).toBeGreaterThan(0);
    await expect.poll(async () => numberIn(await textOf(page, '#cmd-rate')), POLL).toBeGreaterThan(0);
    expect(await textOf(page, '#cmd-detail')).toMatch(/acquire \d/);
    expect(await textOf(page, '#latency')).toMatch(/^≤ [\d.,]+ \/ ≤ [\d.,]+ ms$/);
    expect(await textOf(page, '#hit-ratio')).toMatch(/^\d+\.\d %$/);
    expect(await textOf(page, '#ratio-429')).toMatch(/^\d+\.\d %$/);
    expect(await textOf(page, '#leases')).toMatch(/^\d+ \/ 0$/);

    // Header and instance list: this instance, its Redis, the config version.
    const status = (await (await fetch(`${base}/admin/status`, { headers: ADMIN })).json()) as {
      instance_id: string;
    };
    expect(await textOf(page, '#instance')).toBe(`instance ${status.instance_id}`);
    expect(await textOf(page, '#store')).toMatch(/^redis up · [\d.]+ ms$/);
    expect(await textOf(page, '#config')).toBe('config v1');
    expect(await textOf(page, '#instances tbody')).toContain(`${status.instance_id} (this)`);

    // The history: points accumulate in every chart (one per 250 ms here); busy's chart shows its 2 slots in use
    // under its max of 2, the 429 has its line, and the Redis-only cards are there on Redis.
    await expect
      .poll(() => pointsIn(page, 'svg[data-chart="admissions"] polyline'), POLL)
      .toBeGreaterThanOrEqual(20);
    expect(await pointsIn(page, 'svg[data-chart="rejections"] polyline[data-series="full"]')).toBeGreaterThan(
      1,
    );
    expect(await pointsIn(page, 'svg[data-chart="wait"] polyline')).toBe(0); // waiting is off: no wait ended
    expect(await pointsIn(page, 'svg[data-chart="commands"] polyline')).toBeGreaterThan(1);
    await expect
      .poll(() => textOf(page, '#channel-charts figure[data-channel="busy"] .legend'), POLL)
      .toMatch(/^in use 2\s*max 2$/);
    expect(
      await page.$$eval('#channel-charts figure', (figures) =>
        figures.map((f) => f.getAttribute('data-channel')),
      ),
    ).toEqual(CHANNELS.map((c) => c.id));
    expect(await page.locator('#cmd-card').isVisible()).toBe(true);
    expect(await page.locator('#fleet-card').isVisible()).toBe(true);
    await expect.poll(() => fleetRow(page, 'busy'), POLL).toEqual({ [status.instance_id]: '2' });
    // the high-water mark against the max, in the channels table; an unlimited channel has none
    await expect.poll(async () => (await rowOf(page, 'busy')).peak, POLL).toBe('2 / 2');
    expect((await rowOf(page, 'free')).peak).toBe('—');

    await mkdir(`${ROOT}test-artifacts`, { recursive: true });
    await page.screenshot({ path: ARTIFACT, fullPage: true });
    if (process.env.SLOTGATE_UPDATE_DOCS_SCREENSHOT === '1')
      await copyFile(ARTIFACT, `${ROOT}docs/dashboard.png`);

    // Quiet traffic, then every row matches the admin API read at the same time (one refresh of lag allowed).
    expect(await traffic.stop()).toBeGreaterThan(0);
    await expect
      .poll(async () => mismatches(await readRows(page), await adminChannels(base)), POLL)
      .toEqual([]);

    // The streams end: the bar goes back down; the cooldown is cleared: the column empties.
    for (const stop of streams.splice(0)) await stop();
    await expect.poll(async () => (await rowOf(page, 'busy')).inUse, POLL).toBe('0 / 2');
    expect(await rowOf(page, 'busy')).toMatchObject({ barWidth: '0%', barFull: false });
    await expect.poll(async () => textOf(page, 'tr[data-client="dash-team"] .in-use'), POLL).toBe('0 / 8');
    const cleared = await fetch(`${base}/admin/channels/cool/cooldown`, { method: 'DELETE', headers: ADMIN });
    expect(cleared.status).toBe(200);
    await expect.poll(async () => (await rowOf(page, 'cool')).cooldown, POLL).toBe('—');

    // Nothing secret on the page; no script errors.
    const html = await page.content();
    for (const secret of Object.values(SECRETS)) expect(html).not.toContain(secret);
    expect(errors).toEqual([]);
    expect(gw.admission.stats().leasesLost).toBe(0);
  });

  it(
    'on the embedded store: known figures on the first render, charts, and no Redis cards',
    { timeout: 60_000 },
    async () => {
      const { base } = await startGateway('memory');
      // Traffic before the page opens, and a history point after it: the first render has rates to show.
      for (let i = 0; i < 6; i++) {
        const res = await fetch(`${base}/v1/chat/completions`, {
          method: 'POST',
          headers: CLIENT,
          body: chatBody('m-steady'),
        });
        expect(res.status).toBe(200);
        await res.arrayBuffer();
      }
      await expect
        .poll(async () => {
          const res = await fetch(`${base}/admin/history`, { headers: ADMIN });
          return ((await res.json()) as { admissions_per_s: number[] }).admissions_per_s.length;
        }, POLL)
        .toBeGreaterThan(0);
      // The second refresh's stats read is held until the first render has been read.
      let statsReads = 0;
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      const { page, errors } = await openPage(`${base}/dashboard#token=${SECRETS.admin}`, (p) =>
        p.route('**/admin/stats', async (route) => {
          if (++statsReads > 1) await held;
          await route.continue();
        }),
      );
      cleanups.push(release); // (before the context closes)
      await expect.poll(async () => (await readRows(page)).length, POLL).toBe(CHANNELS.length);
      const first = {
        rate: await textOf(page, '#adm-rate'),
        latency: await textOf(page, '#latency'),
        ratio: await textOf(page, '#ratio-429'),
        leases: await textOf(page, '#leases'),
      };
      release();
      expect(first).toEqual({
        rate: expect.stringMatching(/^[\d.,]+$/),
        latency: expect.stringMatching(/^≤ [\d.,]+ \/ ≤ [\d.,]+ ms$/),
        ratio: '0.0 %',
        leases: '0 / 0',
      });
      await expect.poll(() => statsReads, POLL).toBeGreaterThan(2); // the refreshes go on
      expect(await textOf(page, '#store')).toBe('embedded store');
      // Cards that need Redis stay hidden: commands/s, the nodes, the fleet view (one instance, in this process).
      for (const card of ['#cmd-card', '#redis-card', '#fleet-card'])
        expect(await page.locator(card).isVisible()).toBe(false);
      await expect
        .poll(() => pointsIn(page, 'svg[data-chart="admissions"] polyline'), POLL)
        .toBeGreaterThanOrEqual(3);
      expect(await page.locator('svg[data-chart="commands"]').count()).toBe(0);
      expect(await page.locator('#channel-charts figure').count()).toBe(CHANNELS.length);
      expect(errors).toEqual([]);
    },
  );

  it(
    'the fleet view shows which instance holds which slots when two gateways share a Redis',
    { timeout: 60_000 },
    async () => {
      const server = await RedisServer.start();
      cleanups.push(() => server.stop());
      const prefix = uniquePrefix('fleet');
      const a = await startGateway(server.url, prefix);
      const b = await startGateway(server.url, prefix);
      const streams = [await holdStream(a.base, 'm-busy'), await holdStream(b.base, 'm-busy')];
      cleanups.push(async () => {
        for (const stop of streams) await stop();
      });
      const { page, errors } = await openPage(`${a.base}/dashboard#token=${SECRETS.admin}`);
      const [idA, idB] = [a.gw.admission.instanceId, b.gw.admission.instanceId];
      await expect.poll(() => fleetRow(page, 'busy'), POLL).toEqual({ [idA]: '1', [idB]: '1' });
      expect(await fleetRow(page, 'steady')).toEqual({ [idA]: '0', [idB]: '0' });
      // the two gateways' slots make one high-water mark, read from the store
      expect((await rowOf(page, 'busy')).peak).toBe('2 / 2');
      expect(await textOf(page, '#fleet tr[data-fleet-channel="busy"] td:nth-child(2)')).toBe('2 / 2');
      const head = await page.$$eval('#fleet thead th', (ths) => ths.map((th) => th.textContent));
      expect(head.slice(0, 2)).toEqual(['channel', 'in use / max']);
      expect(head.slice(2).sort()).toEqual([`${idA} (this)`, idB].sort());
      // unlimited channels hold no slot in the store: not in the fleet view
      expect(await page.locator('#fleet tr[data-fleet-channel="free"]').count()).toBe(0);
      expect(await page.locator('#fleet-note').textContent()).toBe('· 2 instances'); // (upper-cased by CSS)

      // One stream ends: its instance's share goes back to 0.
      await streams.pop()!();
      await expect.poll(() => fleetRow(page, 'busy'), POLL).toEqual({ [idA]: '1', [idB]: '0' });
      expect(errors, errors.join('; ')).toEqual([]);
    },
  );

  it('asks for the admin token, refuses a wrong one and signs in with the right one', async () => {
    const { base } = await startGateway();
    const { page, errors } = await openPage(`${base}/dashboard`);
    await expect.poll(() => page.locator('#login').isVisible(), POLL).toBe(true);
    expect(await page.locator('#main').isVisible()).toBe(false);

    await page.fill('#token', 'not-the-token');
    await page.click('#login-form button');
    await expect.poll(() => textOf(page, '#error'), POLL).toBe('That admin token was not accepted.');
    expect(await page.locator('#main').isVisible()).toBe(false);
    // and the message stays through the next refreshes (once a second), not wiped by the next one
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    expect(await textOf(page, '#error')).toBe('That admin token was not accepted.');

    await page.fill('#token', SECRETS.admin);
    await page.click('#login-form button');
    await expect.poll(() => page.locator('#main').isVisible(), POLL).toBe(true);
    await expect.poll(async () => (await readRows(page)).length, POLL).toBe(CHANNELS.length);
    expect(await textOf(page, '#error')).toBe('');
    // Failed fetches of the wrong token are the only console errors (the browser logs every 401).
    expect(errors.filter((e) => !/401/.test(e))).toEqual([]);
    // The token typed in is not left in the page.
    expect(await page.inputValue('#token')).toBe('');
  });

  it(
    'says Redis is down and keeps the rest moving while it is, then recovers',
    { timeout: 60_000 },
    async () => {
      const server = await RedisServer.start();
      cleanups.push(() => server.stop());
      const { gw, base } = await startGateway(server.url);
      const { page } = await openPage(`${base}/dashboard#token=${SECRETS.admin}`);
      await expect.poll(() => textOf(page, '#store'), POLL).toMatch(/^redis up/);
      await expect.poll(async () => (await readRows(page)).length, POLL).toBe(CHANNELS.length);

      await server.stop();
      await expect.poll(() => textOf(page, '#store'), POLL).toBe('redis DOWN');
      expect(await page.locator('#store').getAttribute('class')).toBe('pill bad');
      // /admin/channels reads through the load view: while Redis is down it answers with this instance's own
      // counts (the view's fallback), so the table keeps rendering under the DOWN header.
      await expect.poll(async () => (await readRows(page)).length, POLL).toBe(CHANNELS.length);
      expect(await page.locator('#channels').getAttribute('class')).not.toBe('stale');
      // The counters still refresh: a request on an unlimited channel shows up while Redis is down.
      const res = await fetch(`${base}/v1/chat/completions`, {
        method: 'POST',
        headers: CLIENT,
        body: chatBody('m-free'),
      });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      await expect.poll(() => textOf(page, '#ratio-detail'), POLL).toMatch(/ of 1$/);

      await server.start();
      await expect.poll(() => textOf(page, '#store'), { timeout: 10_000 }).toMatch(/^redis up/);
      await expect.poll(() => textOf(page, '#error'), POLL).toBe('');
      expect(await page.locator('#channels').getAttribute('class')).not.toBe('stale');
      expect(gw.admission.stats().outcomes.acquired).toBe(1);
    },
  );
});
