/**
 * The Lua scripts, loaded from lua/<verbNoun>-<keys>.lua (`n` for a variable number of keys) with their shared
 * helpers from lua/includes/ spliced in where a script says `--- @include "name"`, and registered on an ioredis
 * client with `defineCommand` (EVALSHA first, EVAL on NOSCRIPT, so a restarted Redis reloads them transparently; the
 * same call works on a pipeline and on Cluster). Command names carry the key schema version, so two releases sharing
 * one Redis never run each other's scripts. Each script has a typed wrapper; replies are mapped to results here.
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

/** A script's source with its includes spliced in (each include at most once). */
export function loadLua(file: string): string {
  const seen = new Set<string>();
  return read(file).replace(INCLUDE, (_, name: string) => {
    if (seen.has(name)) return '';
    seen.add(name);
    return read(`includes/${name}`).trimEnd();
  });
}

/** What releaseSlot answers: whether the token held a slot, whether waiters are left, the local waiters granted. */
export interface ReleaseSlotReply {
  removed: boolean;
  waiting: boolean;
  local: string[];
}

/**
 * One script: `call` runs it on a client, `queue` adds it to a pipeline. KEYS always travel as keys.
 *
 * A script with a fixed number of keys (`-3`) is registered with that `numberOfKeys`, so its first argument is its
 * first key: ioredis's auto-pipelining on Cluster groups a call by the slot of its first argument, and would group a
 * call whose first argument is the key count by the slot of "3" (every call then fails with "All keys in the
 * pipeline should belong to the same slots allocation group"). A script with a variable number of keys (`-n`) is
 * also registered once per fixed key count it takes on Cluster (`clusterKeys`, one channel's keys), for the same
 * reason; on a single node only the `-n` command is registered (ioredis sends each command's body once per connection,
 * so a second command of the same script would cost a second EVAL with the body) and takes the count first.
 */
export class Script<Reply> {
  readonly command: string;
  private source: string | undefined;
  /** The number of keys of a `-N` script; undefined for `-n`. */
  private readonly numberOfKeys: number | undefined;

  constructor(
    readonly file: string,
    private readonly parse: (reply: unknown) => Reply,
    /** Key counts a `-n` script is called with on Cluster (each gets a command of its own). */
    private readonly clusterKeys: readonly number[] = [],
  ) {
    this.command = `slotgate_${SCHEMA_VERSION}_${file.replace(/-.*$/, '')}`;
    const n = /-(\d+)$/.exec(file);
    this.numberOfKeys = n ? Number(n[1]) : undefined;
  }

  /** The command registered for a call with `keyCount` keys, and whether it takes the count as its first argument. */
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

  /** Registers the script on the client (idempotent: a client shared by several stores gets it once). */
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

  /** Runs the script on a client; the raw reply (`reply` reads it). */
  send(client: Client, keys: readonly string[], args: readonly Arg[]): Promise<unknown> {
    this.define(client);
    const { name, argv } = this.argsOf(keys, args, isCluster(client));
    const run = (client as unknown as Record<string, (...a: Arg[]) => Promise<unknown>>)[name]!;
    return run.apply(client, argv);
  }

  /**
   * Adds the call to a pipeline of a single node's client it is defined on (on Cluster the store sends calls one by
   * one, auto-pipelined per node); `parse` reads its slot of the pipeline's result.
   */
  queue(pipeline: ChainableCommander, keys: readonly string[], args: readonly Arg[]): void {
    const { name, argv } = this.argsOf(keys, args, false);
    const add = (pipeline as unknown as Record<string, (...a: Arg[]) => unknown>)[name]!;
    add.apply(pipeline, argv);
  }

  /** The typed reply of a raw result (a pipeline's slot). */
  reply(raw: unknown): Reply {
    return this.parse(raw);
  }
}

function numbers(reply: unknown): number[] {
  if (!Array.isArray(reply)) throw new TypeError(`unexpected script reply ${JSON.stringify(reply)}`);
  return reply.map(Number);
}

export const SCRIPTS = {
  /** See lua/acquireSlots-n.lua: one flat list of reply codes for every request of the call. */
  acquireSlots: new Script('acquireSlots-n', parseAcquireReply, [3]),
  /** See lua/renewLeases-n.lua: the 1-based positions of the leases found missing. */
  renewLeases: new Script('renewLeases-n', numbers, [1]),
  /** See lua/reclaimLeases-n.lua: the 1-based positions of the leases not held. */
  reclaimLeases: new Script('reclaimLeases-n', numbers, [1]),
  /** See lua/enqueueWaiter-n.lua: one registration (2 keys). */
  enqueueWaiter: new Script(
    'enqueueWaiter-n',
    (reply): EnqueueReply => ENQUEUE_CODES[code(reply, ENQUEUE_CODES)]!,
    [2],
  ),
  /**
   * The same script with several registrations (a single node only): their replies in the order given, an Error for
   * a registration whose commands failed (the others still stand). It shares enqueueWaiter's command names, so it
   * declares the same Cluster key count: whichever of the two a client defines first registers both names.
   */
  enqueueWaiters: new Script(
    'enqueueWaiter-n',
    (reply): (EnqueueReply | Error)[] => {
      if (!Array.isArray(reply)) throw new TypeError(`unexpected script reply ${JSON.stringify(reply)}`);
      return reply.map((r) =>
        typeof r === 'string' && r.startsWith('!')
          ? new Error(r.slice(1))
          : ENQUEUE_CODES[code(r, ENQUEUE_CODES)]!,
      );
    },
    [2],
  ),
  /** See lua/releaseSlot-2.lua: whether the token held a slot, and the releasing instance's waiters granted. */
  releaseSlot: new Script('releaseSlot-2', (reply): ReleaseSlotReply => {
    if (!Array.isArray(reply)) throw new TypeError(`unexpected script reply ${JSON.stringify(reply)}`);
    return {
      removed: Number(reply[0]) === 1,
      waiting: Number(reply[1]) === 1,
      local: reply.slice(2).map(String),
    };
  }),
  /** See lua/pollWaiter-2.lua. */
  pollWaiter: new Script('pollWaiter-2', (reply): WaiterState => WAITER_CODES[code(reply, WAITER_CODES)]!),
  /** See lua/requeueWaiter-2.lua. */
  requeueWaiter: new Script(
    'requeueWaiter-2',
    (reply): EnqueueReply => ENQUEUE_CODES[code(reply, ENQUEUE_CODES)]!,
  ),
  /** See lua/leaveQueue-2.lua: true when a grant was given back. */
  leaveQueue: new Script('leaveQueue-2', (reply) => Number(reply) === 1),
  /** See lua/checkEpoch-1.lua: the epoch value and the Redis time in ms. */
  checkEpoch: new Script('checkEpoch-1', (reply): { value: string; now: number } => {
    if (!Array.isArray(reply) || reply.length !== 2) {
      throw new TypeError(`unexpected script reply ${JSON.stringify(reply)}`);
    }
    return { value: String(reply[0]), now: Number(reply[1]) };
  }),
  /** See lua/startEpochGrace-1.lua: the epoch value (undefined when the key is gone) and the Redis time in ms. */
  startEpochGrace: new Script('startEpochGrace-1', (reply): { value: string | undefined; now: number } => {
    if (!Array.isArray(reply) || reply.length !== 2) {
      throw new TypeError(`unexpected script reply ${JSON.stringify(reply)}`);
    }
    return { value: reply[0] == null ? undefined : String(reply[0]), now: Number(reply[1]) };
  }),
  /** See lua/readLoads-n.lua: per channel, live leases, live registrations and the cooldown's PTTL. */
  readLoads: new Script('readLoads-n', numbers, [3]),
  /** See lua/readHolders-1.lua: the tokens of the live leases. */
  readHolders: new Script('readHolders-1', (reply) => (Array.isArray(reply) ? reply.map(String) : [])),
  /** See lua/exchangeLoads-3.lua. */
  exchangeLoads: new Script('exchangeLoads-3', parseSnapshotReply),
  /** See lua/fixLeftover-1.lua: removals made (an expiry set counts as one). */
  fixLeftover: new Script('fixLeftover-1', Number),
  /** See lua/releaseDeadOwner-2.lua: the slots released. */
  releaseDeadOwner: new Script('releaseDeadOwner-2', Number),
} as const;

/**
 * The settings scripts (shared-settings.ts), apart from the slot scripts: they work on the two settings keys, not on
 * a channel's. See lua/readSettings-2.lua, lua/writeSettings-2.lua (the version recorded, 0 when not recorded, -1 when
 * the store lost a newer version) and lua/restoreSettings-2.lua (the Redis time of the restore, 0 when not restored).
 */
export const SETTINGS_SCRIPTS = {
  read: new Script('readSettings-2', parseSnapshot),
  write: new Script('writeSettings-2', Number),
  restore: new Script('restoreSettings-2', Number),
} as const;

/**
 * Registers every script on the client before any command goes out: an auto-pipeline made from the client before a
 * script was registered would not carry it, and a call of it joining that pipeline would fail.
 */
export function defineScripts(client: Client): void {
  for (const script of [...Object.values(SCRIPTS), ...Object.values(SETTINGS_SCRIPTS)]) script.define(client);
}

const ACQUIRE_CODES: Record<number, AcquireReply> = { 0: 'full', 1: 'acquired', 2: 'cooling', 3: 'queued' };
const ENQUEUE_CODES: Record<number, EnqueueReply> = { 0: 'queue_full', 1: 'queued', 2: 'granted' };
const WAITER_CODES: Record<number, WaiterState> = { 0: 'gone', 1: 'queued', 2: 'granted' };

/** A script's numeric reply, checked against the codes it may return. */
function code(reply: unknown, codes: Record<number, unknown>): number {
  const n = Number(reply);
  if (!(n in codes)) throw new TypeError(`unexpected script reply ${JSON.stringify(reply)}`);
  return n;
}

/**
 * What exchangeLoads answers: the snapshot (null when it was missing and the call was not to build it), whether this
 * call built it, and the Redis time when it did.
 */
export interface SnapshotReply {
  snapshot: string | null;
  built: boolean;
  nowMs: number | undefined;
}

function parseSnapshotReply(reply: unknown): SnapshotReply {
  if (!Array.isArray(reply) || reply.length !== 3 || (typeof reply[0] !== 'string' && reply[0] !== null)) {
    throw new TypeError(`unexpected script reply ${JSON.stringify(reply)}`);
  }
  return {
    snapshot: reply[0],
    built: Number(reply[1]) === 1,
    nowMs: reply[2] === '' ? undefined : Number(reply[2]),
  };
}

export function parseAcquireReply(reply: unknown): AcquireReply[] {
  if (!Array.isArray(reply)) throw new TypeError(`unexpected acquire reply ${JSON.stringify(reply)}`);
  return reply.map((code) => {
    const parsed = ACQUIRE_CODES[Number(code)];
    if (!parsed) throw new TypeError(`unexpected acquire reply code ${JSON.stringify(code)}`);
    return parsed;
  });
}

/**
 * Splits the acquire script's flat codes into one list per request: a request's codes end at its first "acquired"
 * or after its channels.
 */
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
