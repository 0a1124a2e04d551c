/** slotgate: one admission engine per session on a RedisStore, the whole candidate set offered to every pass. */
import {
  CapacityError,
  ClientLimitError,
  RedisStore,
  createAdmission,
  type Candidate,
  type Client,
} from 'slotgate';
import type { BenchChannel, BenchClient, Contender, Session, SetupContext } from '../types.js';
import { Refused } from '../types.js';

/** The library's client of a bench client, built once per client. */
const clients = new WeakMap<BenchClient, Client>();
function clientOf(c: BenchClient): Client {
  let client = clients.get(c);
  if (!client) {
    client = {
      id: c.id,
      ...(c.maxConcurrency !== undefined ? { maxConcurrency: c.maxConcurrency } : {}),
      ...(c.weight !== undefined ? { weight: c.weight } : {}),
    };
    clients.set(c, client);
  }
  return client;
}

function slotgate(cache: boolean, handoff = true, adaptive = false): Contender {
  return {
    id: adaptive
      ? 'slotgate-adaptive'
      : !handoff
        ? 'slotgate-no-handoff'
        : cache
          ? 'slotgate'
          : 'slotgate-rollback',
    label: adaptive
      ? 'slotgate, adaptive limits on'
      : !handoff
        ? 'slotgate, slot_handoff_enabled=false'
        : cache
          ? 'slotgate (cache on, defaults)'
          : 'slotgate rollback (load_cache_enabled=false)',
    behaviour:
      'one pass per request over the whole candidate set, ordered by the load view' +
      (cache ? ' (200 ms cache)' : ' read from Redis on every pass') +
      (handoff
        ? '; a slot released in the same event-loop turn passes straight to the next request of the instance'
        : '; no slot handoff: every admission goes through the acquire script') +
      '; when every tried channel is full it joins the FIFO queues of two of them in Redis (max waiting = ' +
      'max(32, 8 × max concurrency), up to 5 s) and is granted the next slot freed there, in arrival order across ' +
      'instances; ' +
      'a full queue or a wait time-out is the 429; ' +
      (adaptive
        ? 'every channel has an adaptive limit (`adaptive: {}`) and each release reports a success with its hold as ' +
          'the time to first byte; '
        : '') +
      "a request's client (clients scenario) is passed to acquire as `client` (a limited client takes one of its " +
      'own slots first: `client_*` 429s)',
    clients: true,
    boundedWait:
      "wait_timeout_ms = the wait time-out, max_waiting_per_channel = the scenario's queue bound (other settings as above)",
    async setup(ctx: SetupContext): Promise<Session> {
      const client = ctx.client();
      const store = new RedisStore({ client, prefix: ctx.namespace });
      const admission = createAdmission({
        store,
        settings: {
          load_cache_enabled: cache,
          slot_handoff_enabled: handoff,
          ...(ctx.waitTimeoutMs !== undefined ? { wait_timeout_ms: ctx.waitTimeoutMs } : {}),
          ...(ctx.maxWaiting !== undefined ? { max_waiting_per_channel: ctx.maxWaiting } : {}),
        },
      });
      // Candidate objects are built once per channel, as a gateway's registry does.
      const candidates = new Map<string, Candidate>(
        ctx.channels.map((c) => [
          c.id,
          { id: c.id, maxConcurrency: c.max, ...(adaptive ? { adaptive: {} } : {}) },
        ]),
      );
      const sets = new WeakMap<readonly BenchChannel[], Candidate[]>();
      return {
        async acquire(set, client) {
          let list = sets.get(set);
          if (!list) sets.set(set, (list = set.map((c) => candidates.get(c.id)!)));
          try {
            const ticket = await admission.acquire({
              candidates: list,
              ...(client && !client.unnamed ? { client: clientOf(client) } : {}),
            });
            if (!adaptive) return { channel: ticket.channel.id, release: () => ticket.release() };
            // the report rides on the release: the time held stands for the upstream's time to first byte
            const admittedAt = performance.now();
            return {
              channel: ticket.channel.id,
              release: () =>
                ticket.release({ upstream: { kind: 'ok', firstByteMs: performance.now() - admittedAt } }),
            };
          } catch (err) {
            if (err instanceof CapacityError) throw new Refused(err.reason);
            // the client's own limit, not the channel's: told apart in the reasons
            if (err instanceof ClientLimitError) throw new Refused(`client_${err.reason}`);
            throw err;
          }
        },
        counters: () => {
          const s = admission.stats();
          return {
            ...s.commands,
            fetch_rounds: s.loadView.fetches,
            load_reports: s.loadView.reports,
            handoffs: s.handoffs,
            first_tries: s.firstTries,
            first_tries_full: s.firstTriesFull,
          };
        },
        async close() {
          await admission.close();
          await store.close();
          await client.quit().catch(() => client.disconnect());
        },
      };
    },
  };
}

export const slotgateContender = slotgate(true);
export const slotgateRollbackContender = slotgate(false);
export const slotgateNoHandoffContender = slotgate(true, false);
export const slotgateAdaptiveContender = slotgate(true, true, true);
