/**
 * An adaptive channel in one gateway, on a real Redis with a fake upstream that holds every request until the test
 * answers it, so each report comes with a known number in flight: a 429 with a short Retry-After lowers the limit
 * instead of cooling the channel down while the limit is above its floor; at the floor, past
 * `retry_after_cooldown_s`, or with `enforce: false` it cools the channel down as on any channel. A request that
 * waited under a limit below the max names that limit in its access line. A refused connection and a first byte
 * past its time-out are overloads too.
 */
import { beforeEach, describe, expect, it } from 'vitest';
import { FakeUpstream, gate, type Reply } from '../helpers/fake-upstream.js';
import {
  ADMIN,
  CLIENT,
  LOG_LINES,
  SECRETS,
  call,
  chat,
  configDoc,
  eventually,
  expectNoSecretsLogged,
  startGateway,
  type Answer,
  type TestGateway,
} from '../helpers/gateway.js';
import { useCleanups } from '../helpers/cleanups.js';
import { freePort } from '../helpers/redis-server.js';

const cleanups = useCleanups();
expectNoSecretsLogged();

/** A request held at the upstream until `answer` lets its reply go. */
interface Held {
  answer: (reply?: Reply) => void;
}

let up: FakeUpstream;
let held: Held[];
beforeEach(async () => {
  held = [];
  up = await FakeUpstream.start({
    reply: async () => {
      const g = gate();
      let reply: Reply = { json: { choices: [{ message: { content: 'ok' } }] } };
      held.push({ answer: (r) => ((reply = r ?? reply), g.open()) });
      await g.promise;
      return reply;
    },
  });
  cleanups.push(() => {
    for (const h of held) h.answer();
    return up.close();
  });
});

const tooMany = (retryAfterS: number): Reply => ({
  status: 429,
  headers: { 'retry-after': String(retryAfterS) },
  json: { error: { message: 'too many requests in flight', type: 'rate_limit_error' } },
});

async function adaptiveGateway(adaptive: Record<string, unknown>): Promise<TestGateway> {
  const channel = {
    id: 'a',
    type: 'openai',
    base_url: up.url('a'),
    key: SECRETS.channelKey,
    models: ['gpt-x'],
    max_concurrency: 4,
    adaptive,
  };
  const gw = await startGateway(
    configDoc({ channels: [channel], settings: { retry_times: 0, wait_timeout_ms: 30_000 } }),
  );
  cleanups.push(() => gw.close());
  return gw;
}

function ask(gw: TestGateway, requestId?: string): Promise<Answer> {
  const headers = requestId ? { ...CLIENT, 'x-request-id': requestId } : CLIENT;
  const answer = call(`${gw.url}/v1/chat/completions`, { headers, body: chat('gpt-x') });
  answer.catch(() => {}); // a test that fails early leaves calls the cleanup cuts off
  return answer;
}

async function arrived(n: number): Promise<void> {
  expect(await eventually(() => held.length >= n, 10_000), `${n} requests at the upstream`).toBe(true);
}

interface ChannelView {
  cooling: boolean;
  cooldown_remaining_ms: number;
  adaptive_limit: number | null;
}

async function channelA(gw: TestGateway): Promise<ChannelView> {
  const res = await call(`${gw.url}/admin/channels`, { headers: ADMIN });
  expect(res.status).toBe(200);
  return (res.json() as { channels: (ChannelView & { id: string })[] }).channels.find((c) => c.id === 'a')!;
}

/** Holds 3 of max 4 and answers one 429 (Retry-After 1): the limit falls to 2, as this gateway knows it. */
async function lowerToTwo(gw: TestGateway): Promise<void> {
  const asked = [ask(gw), ask(gw), ask(gw)];
  await arrived(3);
  held[0]!.answer(tooMany(1));
  expect((await asked[0]!).status).toBe(429);
  expect(await eventually(async () => (await channelA(gw)).adaptive_limit === 2)).toBe(true);
  held[1]!.answer();
  held[2]!.answer();
  expect((await Promise.all(asked.slice(1))).map((a) => a.status)).toEqual([200, 200]);
}

describe('a 429 on an adaptive channel', () => {
  it('with a short Retry-After above the floor it lowers the limit and starts no cooldown; at the floor it cools the channel down', async () => {
    const gw = await adaptiveGateway({ min_concurrency: 2 });
    await lowerToTwo(gw);
    expect(await channelA(gw)).toMatchObject({ cooling: false, adaptive_limit: 2 });

    // now at its floor: the same answer cools the channel down
    const asked = [ask(gw), ask(gw)];
    await arrived(5);
    held[3]!.answer(tooMany(1));
    expect((await asked[0]!).status).toBe(429);
    expect(await eventually(async () => (await channelA(gw)).cooling)).toBe(true);
    held[4]!.answer();
    expect((await asked[1]!).status).toBe(200);
  });

  it('with a Retry-After above retry_after_cooldown_s it cools the channel down for that long', async () => {
    const gw = await adaptiveGateway({ retry_after_cooldown_s: 10 });
    const asked = ask(gw);
    await arrived(1);
    held[0]!.answer(tooMany(30));
    expect((await asked).status).toBe(429);
    const view = await channelA(gw);
    expect(view.cooling).toBe(true);
    expect(view.cooldown_remaining_ms).toBeGreaterThan(10_000);
  });

  it('with enforce: false (the limit only observed) it cools the channel down as any 429 does', async () => {
    const gw = await adaptiveGateway({ enforce: false });
    const asked = ask(gw);
    await arrived(1);
    held[0]!.answer(tooMany(1));
    expect((await asked).status).toBe(429);
    expect((await channelA(gw)).cooling).toBe(true);
  });
});

describe('the access line', () => {
  it('names the adaptive limit of a request that waited while it was below the max, and only of that one', async () => {
    const gw = await adaptiveGateway({});
    await lowerToTwo(gw);
    const first = [ask(gw, 'adaptive-held-1'), ask(gw, 'adaptive-held-2')];
    await arrived(5);
    const waited = ask(gw, 'adaptive-waited');
    expect(await eventually(() => gw.gateway.admission.stats().channels.a?.waiting === 1)).toBe(true);
    held[3]!.answer();
    await arrived(6);
    held[4]!.answer();
    held[5]!.answer();
    expect((await Promise.all([...first, waited])).map((a) => a.status)).toEqual([200, 200, 200]);

    const access = (reqId: string) =>
      LOG_LINES.map((l) => JSON.parse(l) as Record<string, unknown>).find(
        (l) => l.msg === 'access' && l.reqId === reqId,
      );
    expect(await eventually(() => access('adaptive-waited') !== undefined)).toBe(true);
    expect(access('adaptive-waited')).toMatchObject({ channel: 'a', adaptive_limit: 2 });
    expect(access('adaptive-waited')!.wait_ms).toBeGreaterThan(0);
    expect(access('adaptive-held-1')).not.toHaveProperty('adaptive_limit');
    expect(access('adaptive-held-2')).not.toHaveProperty('adaptive_limit');
  });
});

describe('no answer at all', () => {
  /** A gateway whose adaptive channel (max 4) points at `baseUrl`, with `rest` of the config (time-outs). */
  async function gatewayTo(baseUrl: string, rest: Record<string, unknown> = {}): Promise<TestGateway> {
    const channel = {
      id: 'a',
      type: 'openai',
      base_url: baseUrl,
      key: SECRETS.channelKey,
      models: ['gpt-x'],
      max_concurrency: 4,
      adaptive: {},
    };
    const gw = await startGateway(
      configDoc({ channels: [channel], settings: { retry_times: 0, cooldown_enabled: false }, ...rest }),
    );
    cleanups.push(() => gw.close());
    return gw;
  }

  it('a refused connection is reported as an overload: the limit falls', async () => {
    const closed = await freePort(); // nothing listens there
    const gw = await gatewayTo(`http://127.0.0.1:${closed}`);
    expect((await channelA(gw)).adaptive_limit).toBe(4);
    expect((await ask(gw)).status).toBe(502);
    expect(await eventually(async () => ((await channelA(gw)).adaptive_limit ?? 4) < 4)).toBe(true);
  });

  it('a first byte past timeouts.first_byte_ms is reported as an overload: the limit falls', async () => {
    const gw = await gatewayTo(up.url('a'), { timeouts: { first_byte_ms: 300 } });
    const asked = ask(gw);
    await arrived(1); // held at the upstream, never answered in time
    expect((await asked).status).toBe(504);
    expect(await eventually(async () => ((await channelA(gw)).adaptive_limit ?? 4) < 4)).toBe(true);
  });
});
