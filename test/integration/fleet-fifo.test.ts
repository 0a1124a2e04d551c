/**
 * Fair admission across instances: one FIFO queue per channel in Redis, slots granted to the oldest waiter, whichever
 * instance it is on. Instances here are separate admission engines on separate Redis connections (what matters to
 * Redis is the connection), and, for the shares, separate processes. The exact ratios belong to the benchmark; these
 * tests hold orders and bounds a busy machine cannot break. The queue tests run on one node and on a 3-master cluster,
 * where grants go out by PUBLISH inside the release script (the cluster bus carries them to every node) and each
 * instance's subscriber is connected to whichever node it picked.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import type { Admission, Ticket } from '../../packages/slotgate/src/admission/types.js';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import type { AcquirerOptions } from '../helpers/acquirer.js';
import { killAcquirers, startAcquirer, within } from '../helpers/acquirer-process.js';
import { useCleanups } from '../helpers/cleanups.js';
import { FakeUpstream } from '../helpers/fake-upstream.js';
import { RedisServer } from '../helpers/redis-server.js';
import { redisUrl, topologies, uniquePrefix, type StoreTarget } from '../helpers/redis.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const cleanups = useCleanups();

interface Instance {
  store: RedisStore;
  admission: Admission;
}

/** An instance on its own connection; waiting generous, queues deep enough for every test here. */
function instance(
  prefix: string,
  target: StoreTarget = { url: redisUrl() },
  settings: Record<string, unknown> = {},
): Instance {
  const store = new RedisStore({ ...target, prefix, claimMs: 1000 });
  const admission = createAdmission({
    store,
    settings: { wait_timeout_ms: 20_000, max_waiting_per_channel: 20, load_cache_ttl_ms: 50, ...settings },
  });
  cleanups.push(async () => {
    await admission.close();
    await store.close();
  });
  return { store, admission };
}

const one: Candidate[] = [{ id: 'ch', maxConcurrency: 1 }];

/** Resolves once the admission has a waiter queued (by its own count). */
const queuedOn = (a: Admission) => expect.poll(() => a.stats().channels.ch?.waiting ?? 0).toBeGreaterThan(0);

describe.each(topologies())('FIFO across instances on $name', ({ target }) => {
  it('the waiter queued first is admitted first, even when the other instance releases and asks again', async () => {
    const prefix = uniquePrefix('fifo');
    const a = instance(prefix, target);
    const b = instance(prefix, target);
    const held = await a.admission.acquire({ candidates: one });
    const order: string[] = [];
    const bWaits = b.admission.acquire({ candidates: one }).then((t) => (order.push('b'), t));
    await queuedOn(b.admission);
    const aWaits = a.admission.acquire({ candidates: one }).then((t) => (order.push('a'), t));
    await queuedOn(a.admission);
    await held.release();
    const bTicket = await bWaits;
    expect(order).toEqual(['b']);
    await bTicket.release();
    const aTicket = await aWaits;
    expect(order).toEqual(['b', 'a']);
    expect(a.admission.stats().handoffs + b.admission.stats().handoffs).toBe(0);
    await aTicket.release();
  });

  it('handoff never overtakes a queued waiter: a release followed by an acquire in the same turn queues', async () => {
    const prefix = uniquePrefix('nohandoff');
    const a = instance(prefix, target, { slot_handoff_enabled: true });
    const b = instance(prefix, target);
    const held = await a.admission.acquire({ candidates: one });
    const bWaits = b.admission.acquire({ candidates: one });
    await queuedOn(b.admission);
    // a learns of the queue (the message to holders, or its next acquire's reply) before it gives the slot back
    await expect.poll(() => a.store.queued('ch')).toBe(true);
    const released = held.release();
    const again = a.admission.acquire({ candidates: one }); // same turn: a handoff would take the slot here
    await released;
    const bTicket = await bWaits;
    expect(a.admission.stats().handoffs).toBe(0);
    let aSettled = false;
    void again.then(() => (aSettled = true));
    // until a's acquire has settled or waits in the queue (by a's own count)
    await expect
      .poll(() => aSettled || (a.admission.stats().channels.ch?.waiting ?? 0) > 0, { timeout: 10_000 })
      .toBe(true);
    expect(aSettled).toBe(false); // still behind b
    await bTicket.release();
    const aTicket = await again;
    await aTicket.release();
  });

  it('a waiter that gave up never holds the slot up: the next one is served at the release', async () => {
    const prefix = uniquePrefix('gaveup');
    const a = instance(prefix, target);
    const b = instance(prefix, target);
    const c = instance(prefix, target);
    const held = await a.admission.acquire({ candidates: one });
    const abort = new AbortController();
    const bWaits = b.admission.acquire({ candidates: one, signal: abort.signal });
    await queuedOn(b.admission);
    const cWaits = c.admission.acquire({ candidates: one });
    await queuedOn(c.admission);
    abort.abort();
    await expect(bWaits).rejects.toMatchObject({ reason: 'aborted' });
    const started = Date.now();
    await held.release();
    const cTicket = await cWaits;
    // served by the release's grant, not by a safety poll (those are a second or more apart)
    expect(Date.now() - started).toBeLessThan(900);
    expect(c.admission.stats().grants).toBe(1);
    await cTicket.release();
  });

  it('a grant to an instance that died comes back at the claim deadline and goes to the next waiter', async () => {
    const prefix = uniquePrefix('dead');
    const a = instance(prefix, target);
    // the first waiter is a process that is killed while it waits
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'test/helpers/queued-waiter.ts', JSON.stringify(target), prefix, 'ch'],
      { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] },
    );
    cleanups.push(() => void child.kill('SIGKILL'));
    const held = await a.admission.acquire({ candidates: one });
    await within(
      new Promise<void>((resolve) =>
        child.stdout!.on('data', (d: Buffer) => d.includes('queued') && resolve()),
      ),
      15_000,
      'the waiter process queueing',
    );
    const b = instance(prefix, target);
    const bWaits = b.admission.acquire({ candidates: one });
    await queuedOn(b.admission);
    child.kill('SIGKILL');
    await new Promise((resolve) => child.once('exit', resolve));
    const released = Date.now();
    await held.release(); // the grant goes to the dead waiter, the oldest
    const bTicket = await within(bWaits, 10_000, 'the next waiter being served');
    // not before the dead one's claim deadline (1 s), and within it plus one safety poll period (at most 2 s)
    expect(Date.now() - released).toBeGreaterThanOrEqual(900);
    expect(Date.now() - released).toBeLessThan(6000);
    await bTicket.release();
  });
});

describe('Redis restarting empty while requests wait', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('a waiter whose queue was lost joins again at its safety poll and is served: nobody is lost for good', async () => {
    const prefix = uniquePrefix('restart');
    const a = instance(prefix, { url: server.url }, { safety_poll_ms: 2500 }); // safety polls every second
    const b = instance(prefix, { url: server.url }, { safety_poll_ms: 2500 });
    const held: Ticket<Candidate> = await a.admission.acquire({ candidates: one });
    const bWaits = b.admission.acquire({ candidates: one });
    await queuedOn(b.admission);
    await held.release({ handoff: false });
    const first = await bWaits;
    await first.release({ handoff: false });
    // a second round: b waits behind a's new ticket, then Redis restarts with nothing in it
    const held2 = await a.admission.acquire({ candidates: one });
    const bWaits2 = b.admission.acquire({ candidates: one });
    await queuedOn(b.admission);
    await held2.release({ handoff: false });
    const second = await bWaits2;
    await second.release({ handoff: false });
    const held3 = await a.admission.acquire({ candidates: one });
    const bWaits3 = b.admission.acquire({ candidates: one });
    await queuedOn(b.admission);
    await server.restart();
    // a gives its slot back after the restart; b, whose queue is gone, finds out at its next safety poll
    await held3.release({ handoff: false }).catch(() => {});
    const third = await within(bWaits3, 15_000, 'the waiter being served after the restart');
    expect(third.channel.id).toBe('ch');
    await third.release({ handoff: false });
  }, 30_000);
});

const STAGGER_MS = 500;
const RUN_MS = 3000;

describe.each(topologies())('equal demand on several processes on $name', ({ target }) => {
  const prefix = uniquePrefix('fair');
  let upstream: FakeUpstream;

  beforeAll(async () => {
    upstream = await FakeUpstream.start({
      reply: () => ({ delayMs: 20, body: 'ok', headers: { 'content-type': 'text/plain' } }),
      keepRequests: false,
    });
  });
  afterEach(() => killAcquirers());
  afterAll(async () => {
    killAcquirers();
    await upstream?.close();
  });

  it.each([2, 3])(
    '%i processes with equal demand get equal shares of 2 channels × max 2',
    async (n) => {
      const opts: AcquirerOptions = {
        redis: target,
        prefix: `${prefix}-${n}`,
        upstream: upstream.origin,
        acquirers: 8,
        admissions: Number.MAX_SAFE_INTEGER,
        channels: 2,
        maxConcurrency: 2,
        settings: { max_waiting_per_channel: 40, wait_timeout_ms: 10_000 },
        deadlineMs: 20_000,
      };
      // The first instance starts alone and holds every slot when the others arrive 500 ms later (the set-up in which
      // a local handoff used to keep the slots on the first instance); all stop at the same moment.
      const children = Array.from({ length: n }, (_, i) =>
        startAcquirer({ ...opts, durationMs: i === 0 ? STAGGER_MS + RUN_MS : RUN_MS }),
      );
      await within(Promise.all(children.map((c) => c.ready)), 15_000, 'starting the acquirer processes');
      children[0]!.proc.stdin!.write('go\n');
      await sleep(STAGGER_MS);
      for (const c of children.slice(1)) c.proc.stdin!.write('go\n');
      const summaries = await within(Promise.all(children.map((c) => c.summary)), 25_000, 'the run');
      // admissions per second of running, per instance
      const admitted = summaries.map((s, i) => s.admitted / (i === 0 ? STAGGER_MS + RUN_MS : RUN_MS));
      const report = JSON.stringify({ summaries, highest: upstream.highest() });
      // every instance was served, and alike (a FIFO queue serves waiters in arrival order, whoever they are)
      expect(Math.min(...admitted), report).toBeGreaterThan(0);
      expect(Math.min(...admitted) / Math.max(...admitted), report).toBeGreaterThanOrEqual(0.7);
      for (const s of summaries) {
        expect(s.capacityErrors, report).toEqual({});
        expect(s.otherErrors, report).toEqual({});
      }
      // and the limit held at the upstream
      for (const id of upstream.channels()) expect(upstream.record(id).max, report).toBeLessThanOrEqual(2);
    },
    45_000,
  );
});
