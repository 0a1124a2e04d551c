/**
 * The Lua scripts, lua/<verbNoun>-<keys>.lua (`n`: a variable number of keys; KEYS and ARGV in each file's header)
 * with `--- @include "name"` spliced in from lua/includes/, registered with `defineCommand` (EVALSHA, EVAL on
 * NOSCRIPT). Command names carry the schema version, so two releases sharing a Redis never run each other's scripts.
 */
import { readFileSync } from 'node:fs';
import type { ChainableCommander, Cluster, Redis } from 'ioredis';
import type { AcquireReply, EnqueueReply, WaiterState } from '../store.js';
import { isCluster } from './connection/connection.js';
import { SCHEMA_VERSION } from './keys.js';
import { parseSnapshot } from './fleet/settings-record.js';

type Client = Redis | Cluster;
type Arg = string | number;

const INCLUDE = /^--- @include "([A-Za-z0-9_-]+)"$/gm;

function read(path: string): string {
  return readFileSync(new URL(`./lua/${path}.lua`, import.meta.url), 'utf8');
}

/** Each include at most once. */
export function loadLua(file: string): string {
  const seen = new Set<string>();
  return read(file).replace(INCLUDE, (_, name: string) => {
    if (seen.has(name)) return '';
    seen.add(name);
    return read(`includes/${name}`).trimEnd();
  });
}

/** releaseSlot's reply: `limit` the adaptive limit after its report; `local` the releasing instance's waiters granted. */
export interface ReleaseSlotReply {
  removed: boolean;
  waiting: boolean;
  limit: number | undefined;
  local: string[];
}

/**
 * A script with a fixed key count (`-4`) is registered with that `numberOfKeys`, so its first argument is its first
 * key: auto-pipelining on Cluster groups a call by its first argument's slot, and the slot of a key count would fail
 * it. For the same reason a `-n` script is also registered per key count it takes on Cluster (`clusterKeys`); on one
 * node only the `-n` command is (each command's body costs one EVAL per connection), with the count first.
 */
export class Script<Reply> {
  readonly command: string;
  private source: string | undefined;
  private readonly numberOfKeys: number | undefined;

  constructor(
    readonly file: string,
    private readonly parse: (reply: unknown) => Reply,
    private readonly clusterKeys: readonly number[] = [],
  ) {
    this.command = `slotgate_${SCHEMA_VERSION}_${file.replace(/-.*$/, '')}`;
    const n = /-(\d+)$/.exec(file);
    this.numberOfKeys = n ? Number(n[1]) : undefined;
  }

  /** `counted`: the command takes the key count as its first argument. */
  private commandFor(keyCount: number, cluster: boolean): { name: string; counted: boolean } {
    if (this.numberOfKeys !== undefined) {
      if (keyCount !== this.numberOfKeys) {
        throw new RangeError(`${this.file} takes ${this.numberOfKeys} keys, got ${keyCount}`);
      }
      return { name: this.command, counted: false };
    }
    if (cluster && this.clusterKeys.includes(keyCount))
      return { name: `${this.command}_${keyCount}`, counted: false };
    return { name: this.command, counted: true };
  }

  /** Idempotent: a client shared by several stores gets it once. */
  define(client: Client): void {
    if (typeof (client as unknown as Record<string, unknown>)[this.command] === 'function') return;
    this.source ??= loadLua(this.file);
    client.defineCommand(this.command, { lua: this.source, numberOfKeys: this.numberOfKeys });
    if (!isCluster(client)) return;
    for (const n of this.clusterKeys) {
      client.defineCommand(`${this.command}_${n}`, { lua: this.source, numberOfKeys: n });
    }
  }

  private argsOf(
    keys: readonly string[],
    args: readonly Arg[],
    cluster: boolean,
  ): { name: string; argv: Arg[] } {
    const { name, counted } = this.commandFor(keys.length, cluster);
    return { name, argv: counted ? [keys.length, ...keys, ...args] : [...keys, ...args] };
  }

  async call(client: Client, keys: readonly string[], args: readonly Arg[]): Promise<Reply> {
    return this.parse(await this.send(client, keys, args));
  }

  /** The raw reply (`reply` reads it). */
  send(client: Client, keys: readonly string[], args: readonly Arg[]): Promise<unknown> {
    this.define(client);
    const { name, argv } = this.argsOf(keys, args, isCluster(client));
    const run = (client as unknown as Record<string, (...a: Arg[]) => Promise<unknown>>)[name]!;
    return run.apply(client, argv);
  }

  /** Adds the call to a single node's pipeline (on Cluster calls go one by one, auto-pipelined per node). */
  queue(pipeline: ChainableCommander, keys: readonly string[], args: readonly Arg[]): void {
    const { name, argv } = this.argsOf(keys, args, false);
    const add = (pipeline as unknown as Record<string, (...a: Arg[]) => unknown>)[name]!;
    add.apply(pipeline, argv);
  }

  reply(raw: unknown): Reply {
    return this.parse(raw);
  }
}

const unexpected = (reply: unknown) => new TypeError(`unexpected script reply ${JSON.stringify(reply)}`);

/** The reply as an array (of `length` items, when given). */
function list(reply: unknown, length?: number): unknown[] {
  if (!Array.isArray(reply) || (length !== undefined && reply.length !== length)) throw unexpected(reply);
  return reply;
}

const numbers = (reply: unknown): number[] => list(reply).map(Number);
const enqueueReply = (reply: unknown): EnqueueReply => ENQUEUE_CODES[code(reply, ENQUEUE_CODES)]!;

export const SCRIPTS = {
  acquireSlots: new Script('acquireSlots-n', parseAcquireReply, [5]),
  renewLeases: new Script('renewLeases-n', numbers, [1]),
  reclaimLeases: new Script('reclaimLeases-n', numbers, [1]),
  enqueueWaiter: new Script('enqueueWaiter-n', enqueueReply, [4]),
  /**
   * The same script with several registrations (single node only), an Error for one whose commands failed. It shares
   * enqueueWaiter's command names, so it declares the same Cluster key count (whichever is defined first registers).
   */
  enqueueWaiters: new Script(
    'enqueueWaiter-n',
    (reply): (EnqueueReply | Error)[] =>
      list(reply).map((r) =>
        typeof r === 'string' && r.startsWith('!') ? new Error(r.slice(1)) : enqueueReply(r),
      ),
    [4],
  ),
  releaseSlot: new Script('releaseSlot-4', (reply): ReleaseSlotReply => {
    const [removed, waiting, limit, ...local] = list(reply);
    return {
      removed: Number(removed) === 1,
      waiting: Number(waiting) === 1,
      limit: Number(limit) > 0 ? Number(limit) : undefined,
      local: local.map(String),
    };
  }),
  pollWaiter: new Script('pollWaiter-4', (reply): WaiterState => WAITER_CODES[code(reply, WAITER_CODES)]!),
  requeueWaiter: new Script('requeueWaiter-4', enqueueReply),
  leaveQueue: new Script('leaveQueue-4', (reply) => Number(reply) === 1),
  checkEpoch: new Script('checkEpoch-1', (reply): { value: string; now: number } => {
    const [value, now] = list(reply, 2);
    return { value: String(value), now: Number(now) };
  }),
  startEpochGrace: new Script('startEpochGrace-1', (reply): { value: string | undefined; now: number } => {
    const [value, now] = list(reply, 2);
    return { value: value == null ? undefined : String(value), now: Number(now) };
  }),
  readLoads: new Script('readLoads-n', numbers, [3]),
  readPeaks: new Script('readPeaks-n', numbers, [2]),
  readHolders: new Script('readHolders-1', (reply) => (Array.isArray(reply) ? reply.map(String) : [])),
  exchangeLoads: new Script('exchangeLoads-3', parseSnapshotReply),
  fixLeftover: new Script('fixLeftover-1', Number),
  releaseDeadOwner: new Script('releaseDeadOwner-4', Number),
} as const;

/** The settings scripts, on the two settings keys. */
export const SETTINGS_SCRIPTS = {
  read: new Script('readSettings-2', parseSnapshot),
  write: new Script('writeSettings-2', Number),
  restore: new Script('restoreSettings-2', Number),
} as const;

/** The probe of what the Redis user may run (fencing/access.ts): the one script that reads no clock. */
export const ACCESS_SCRIPT = new Script('probeAccess-1', (reply) =>
  Array.isArray(reply) ? reply.map(String) : [],
);

/** Before any command goes out: an auto-pipeline made before a script was registered would fail its calls. */
export function defineScripts(client: Client): void {
  for (const script of [...Object.values(SCRIPTS), ...Object.values(SETTINGS_SCRIPTS), ACCESS_SCRIPT])
    script.define(client);
}

const ACQUIRE_CODES: Record<number, AcquireReply> = { 0: 'full', 1: 'acquired', 2: 'cooling', 3: 'queued' };
const ENQUEUE_CODES: Record<number, EnqueueReply> = { 0: 'queue_full', 1: 'queued', 2: 'granted' };
const WAITER_CODES: Record<number, WaiterState> = { 0: 'gone', 1: 'queued', 2: 'granted' };

function code(reply: unknown, codes: Record<number, unknown>): number {
  const n = Number(reply);
  if (!(n in codes)) throw unexpected(reply);
  return n;
}

/** exchangeLoads' reply: `snapshot` null when missing and not built; `nowMs` the Redis time when built. */
export interface SnapshotReply {
  snapshot: string | null;
  built: boolean;
  nowMs: number | undefined;
}

function parseSnapshotReply(reply: unknown): SnapshotReply {
  const [snapshot, built, nowMs] = list(reply, 3);
  if (typeof snapshot !== 'string' && snapshot !== null) throw unexpected(reply);
  return { snapshot, built: Number(built) === 1, nowMs: nowMs === '' ? undefined : Number(nowMs) };
}

function parseAcquireReply(reply: unknown): AcquireReply[] {
  return list(reply).map((r) => ACQUIRE_CODES[code(r, ACQUIRE_CODES)]!);
}

/** The acquire script's flat codes per request: a request's end at its first "acquired" or after its channels. */
export function splitAcquireReply(
  codes: readonly AcquireReply[],
  requests: readonly { targets: readonly unknown[] }[],
): AcquireReply[][] {
  const out: AcquireReply[][] = [];
  let at = 0;
  for (const { targets } of requests) {
    const start = at;
    while (at < codes.length && at - start < targets.length) {
      if (codes[at++] === 'acquired') break;
    }
    out.push(codes.slice(start, at));
  }
  if (at !== codes.length || out.some((c) => c.length === 0)) {
    throw new TypeError(`unexpected acquire reply ${JSON.stringify(codes)} for ${requests.length} requests`);
  }
  return out;
}
