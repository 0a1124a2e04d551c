/**
 * A config reload reaches the requests already waiting, on a real Redis with a fake upstream that counts what each
 * channel has in flight: a lowered max_concurrency applies to them (after the reload a channel gets a new request
 * only while fewer than the new max are in flight), and a disabled or removed channel gets no new request (its
 * waiters move to the channels still valid for them, or fail as a new request would). Every upstream request is held
 * at a gate the test opens, so each assertion is about an order of events, never about a time window.
 */
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { loadConfigFile } from '../../packages/gateway/src/config.js';
import { FakeUpstream, gate, type ReceivedRequest } from '../helpers/fake-upstream.js';
import {
  CLIENT,
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

const cleanups = useCleanups();
expectNoSecretsLogged();

/** What the upstream saw of one request: its channel, and how many that channel had in flight with it. */
interface Arrival {
  channel: string;
  inFlight: number;
  /** The status it is answered with once opened. */
  status: number;
  /** Lets the request's answer go. */
  open: () => void;
  request: ReceivedRequest;
}

let up: FakeUpstream;
/** Every request the upstream received, in arrival order; each is held until the test opens it. */
let arrivals: Arrival[];
beforeEach(async () => {
  arrivals = [];
  up = await FakeUpstream.start({
    reply: async (request) => {
      const held = gate();
      const arrival: Arrival = {
        channel: request.channel,
        inFlight: up.record(request.channel).current,
        status: 200,
        open: held.open,
        request,
      };
      arrivals.push(arrival);
      await held.promise;
      return { status: arrival.status, json: { channel: request.channel } };
    },
  });
  cleanups.push(() => {
    for (const a of arrivals) a.open();
    return up.close();
  });
});

const channel = (id: string, extra: Record<string, unknown> = {}) => ({
  id,
  type: 'openai',
  base_url: up.url(id),
  key: SECRETS.channelKey,
  models: ['gpt-x'],
  max_concurrency: 3,
  ...extra,
});

/** Long waits, and queues long enough for every waiter of these tests. */
const SETTINGS = { wait_timeout_ms: 30_000, max_waiting_per_channel: 20 };

async function reloadingGateway(channels: Record<string, unknown>[]) {
  const dir = await mkdtemp(join(tmpdir(), 'slotgate-reload-waiting-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, 'slotgate.yaml');
  let n = 0;
  const doc = (list: Record<string, unknown>[]) => configDoc({ channels: list, settings: SETTINGS });
  const write = async (list: Record<string, unknown>[]) => {
    const tmp = join(dir, `.next-${++n}`);
    await writeFile(tmp, JSON.stringify(doc(list), null, 2));
    await rename(tmp, path);
  };
  await write(channels);
  const gw = await startGateway(await loadConfigFile(path), { configPath: path });
  cleanups.push(() => gw.close());
  /** Writes the file and reloads it (the watcher may reload it too: the second reload finds nothing new). */
  const reload = async (list: Record<string, unknown>[]) => {
    await write(list);
    expect(await gw.gateway.reload()).toBeUndefined();
    expect(gw.gateway.config.channels.map((c) => [c.id, c.max_concurrency, c.enabled])).toEqual(
      list.map((c) => [c.id, c.max_concurrency ?? 3, c.enabled ?? true]),
    );
  };
  return { gw, reload };
}

function ask(gw: TestGateway): Promise<Answer> {
  const answer = call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: chat('gpt-x') });
  answer.catch(() => {}); // a test that fails early leaves calls the cleanup cuts off
  return answer;
}

async function arrived(n: number): Promise<void> {
  expect(await eventually(() => arrivals.length >= n, 10_000)).toBe(true);
}

const waitingOn = (gw: TestGateway, id: string) => gw.gateway.admission.stats().channels[id]?.waiting ?? 0;

describe('a config reload reaches the requests already waiting', () => {
  it('max 3 → 1 while 4 wait: after the reload a request reaches the upstream only with nothing else in flight', async () => {
    const { gw, reload } = await reloadingGateway([channel('a')]);
    const answers = Array.from({ length: 3 }, () => ask(gw));
    await arrived(3);
    const waiters = Array.from({ length: 4 }, () => ask(gw));
    expect(await eventually(() => waitingOn(gw, 'a') === 4)).toBe(true);

    await reload([channel('a', { max_concurrency: 1 })]);
    const before = arrivals.length;
    // The three admitted under max 3 end one by one; each end must not let a waiter in while one is still there.
    for (let i = 0; i < 3; i++) {
      arrivals[i]!.open();
      await arrivals[i]!.request.done;
    }
    // Then the four waiters one at a time: the next arrives only once the one before it has ended.
    for (let i = 0; i < 4; i++) {
      await arrived(before + i + 1);
      const next = arrivals[before + i]!;
      next.open();
      await next.request.done;
    }
    const statuses = (await Promise.all([...answers, ...waiters])).map((a) => a.status);
    expect(statuses).toEqual(Array(7).fill(200));
    const afterReload = arrivals.slice(before);
    expect(afterReload.map((a) => [a.channel, a.inFlight])).toEqual(Array(4).fill(['a', 1]));
    expect(up.record('a').max).toBe(3); // before the reload
  });

  it('a channel disabled while requests wait on it gets no new request: they move to the channel still serving the model', async () => {
    const { gw, reload } = await reloadingGateway([
      channel('a', { max_concurrency: 2 }),
      channel('b', { max_concurrency: 1 }),
    ]);
    const held = Array.from({ length: 3 }, () => ask(gw));
    await arrived(3);
    expect(arrivals.map((a) => a.channel).sort()).toEqual(['a', 'a', 'b']);
    const waiters = Array.from({ length: 3 }, () => ask(gw));
    // each waiter queues on both full channels
    expect(await eventually(() => waitingOn(gw, 'a') === 3 && waitingOn(gw, 'b') === 3)).toBe(true);

    await reload([
      channel('a', { max_concurrency: 2, enabled: false }),
      channel('b', { max_concurrency: 1 }),
    ]);
    expect(await eventually(() => waitingOn(gw, 'a') === 0 && waitingOn(gw, 'b') === 3)).toBe(true);
    // a's requests end first: its freed slots must not go to anyone
    const onA = arrivals.filter((a) => a.channel === 'a');
    for (const a of onA) {
      a.open();
      await a.request.done;
    }
    // then b serves the waiters one at a time
    const atB = () => arrivals.filter((a) => a.channel === 'b');
    for (let served = 0; served < 4; served++) {
      expect(await eventually(() => atB().length > served, 10_000)).toBe(true);
      const next = atB()[served]!;
      next.open();
      await next.request.done;
    }
    const answers = await Promise.all([...held, ...waiters]);
    expect(answers.map((a) => a.status)).toEqual(Array(6).fill(200));
    expect(up.record('a').received).toBe(2);
    expect(up.record('b').received).toBe(4);
    expect(up.record('b').max).toBe(1);
  });

  it('a retry after a reload goes only to the channels in force: a disabled channel is not tried', async () => {
    const { gw, reload } = await reloadingGateway([
      channel('first', { priority: 10 }),
      channel('second', { priority: 0 }),
    ]);
    let answered: Answer | undefined;
    void ask(gw).then((a) => (answered = a));
    await arrived(1);
    expect(arrivals[0]!.channel).toBe('first');
    await reload([channel('first', { priority: 10 }), channel('second', { priority: 0, enabled: false })]);
    arrivals[0]!.status = 500; // retryable: before the reload it would have been retried on `second`
    arrivals[0]!.open();
    expect(await eventually(() => answered !== undefined || arrivals.length > 1, 10_000)).toBe(true);
    expect(arrivals.map((a) => a.channel)).toEqual(['first']);
    expect(answered?.status).toBe(500); // the upstream's own answer: nothing left to retry on
  });

  it('when the only channel serving the model is disabled or removed, its waiters fail as a new request would (404 model_not_found)', async () => {
    for (const change of ['disabled', 'removed'] as const) {
      arrivals.length = 0;
      up.reset();
      const { gw, reload } = await reloadingGateway([channel('only', { max_concurrency: 1 })]);
      const first = ask(gw);
      await arrived(1);
      const waiters = Array.from({ length: 2 }, () => ask(gw));
      expect(await eventually(() => waitingOn(gw, 'only') === 2)).toBe(true);

      await reload(
        change === 'disabled'
          ? [channel('only', { max_concurrency: 1, enabled: false }), channel('other', { models: ['other'] })]
          : [channel('other', { models: ['other'] })],
      );
      const failed = await Promise.all(waiters);
      expect(failed.map((a) => a.status)).toEqual([404, 404]);
      expect(failed.map((a) => (a.json() as { error: { code: string } }).error.code)).toEqual([
        'model_not_found',
        'model_not_found',
      ]);
      expect((await ask(gw)).status).toBe(404); // a new request gets the same
      arrivals[0]!.open();
      expect((await first).status).toBe(200);
      expect(up.record('only').received).toBe(1);
      await gw.close();
    }
  });
});
