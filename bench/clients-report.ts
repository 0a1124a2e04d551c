/** The clients scenario's tables (parameters above them) and its part of the legend. */
import type { ClientFigures, ClientsRecord } from './clients-figures.js';
import type { ClientsScenario } from './clients.js';
import type { ClientPolicy } from './ideal-clients.js';
import { meanHoldMs } from './openloop.js';
import { fmt, table, type Meta } from './report.js';
import type { RunRecord } from './run.js';

const ms = (n: number) => fmt(n, n < 10 ? 2 : n < 100 ? 1 : 0);
const pct = (n: number) => (Number.isFinite(n) ? `${fmt(100 * n, 1)} %` : '–');
const slash = (values: readonly number[], f: (n: number) => string) => values.map(f).join(' / ');

export const IDEAL_LABEL: Record<ClientPolicy, string> = {
  'weighted-fair': 'ideal weighted-fair',
  fifo: 'ideal FIFO',
};

/**
 * The measured client's p90 wait over the ideal weighted-fair scheduler's, on the run's own loop and limits;
 * Infinity when it was starved (no admission in the window, where the ideal had some).
 */
export function measuredRatio(c: ClientsRecord, figures: readonly ClientFigures[] = c.clients): number {
  const mine = figures.find((f) => f.client === c.measured);
  const ideal = c.ideal['weighted-fair'].find((f) => f.client === c.measured)?.wait.p90 ?? NaN;
  if (mine && mine.admitted === 0 && Number.isFinite(ideal)) return Infinity;
  return (mine?.wait.p90 ?? NaN) / ideal;
}

/** A ratio cell: "starved" for Infinity. */
export const ratioText = (ratio: number): string =>
  ratio === Infinity ? 'starved (0 admitted in the window)' : `${fmt(ratio, 2)} ×`;

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

export function clientsParamsLine(s: ClientsScenario, runs: readonly RunRecord[], meta: Meta): string {
  const durationS = runs[0]!.params.durationS;
  const instances = s.instances.join(' / ');
  const clients = s.clients
    .map(
      (c) =>
        `${c.id}: ${plural(c.workersPerInstance, 'worker')} per instance ` +
        `(${c.workersPerInstance * s.instances[0]!} in all), weight ${c.weight}`,
    )
    .join('; ');
  const variants = s.variants
    .map(
      (v) =>
        `"${v.label}" (${
          Object.keys(v.limits).length
            ? Object.entries(v.limits)
                .map(([id, n]) => `${id} maxConcurrency ${n}`)
                .join(', ')
            : 'clients named, no maxConcurrency'
        })`,
    )
    .join(', ');
  return (
    `**${s.title}** — 1 bounded channel × max ${s.max}, ${instances} instances (one process each), each running ` +
    `closed-loop workers of every client (acquire → hold → release, again at once; 5 ms back-off after a 429), every ` +
    `request naming its client. ${clients}. Log-normal holds like LLM calls (median ${s.hold.medianMs} ms, ` +
    `σ ${s.hold.sigma}, capped at ${s.hold.capMs / 1000} s; mean ${fmt(meanHoldMs(s.hold), 0)} ms), each worker's ` +
    `from its own seeded stream (seed ${s.seed}): its k-th admitted request holds the same time in every run and in ` +
    `the ideal schedulers. Wait time-out ${s.waitTimeoutMs / 1000} s, queues of up to ${s.maxWaiting} per channel ` +
    `and per limited client. Figures over requests arriving in a ${durationS} s window after ` +
    `${s.settleMs / 1000} s of settling; workers stop asking at its end, what waits is still served. slotgate ` +
    `variants: ${variants}; peers without clients run the first one (clients named and ignored). ` +
    `Ideal schedulers: the same loop in memory (no time-out), with each variant's limits. ` +
    `Redis: ${meta.redis}. Node ${meta.node}, ${meta.cpu}.`
  );
}

/** One row per client: the ideal schedulers of each variant's loop first, then every run. */
export function clientsTable(runs: readonly RunRecord[]): string {
  const withClients = runs.filter((r) => r.fleet?.clients);
  const rows: string[][] = [];
  const row = (name: string, c: ClientsRecord, figures: readonly ClientFigures[], r?: RunRecord) => {
    const ratio = measuredRatio(c, figures);
    for (const f of figures) {
      rows.push([
        name,
        f.client,
        fmt(f.workers, 0),
        f.limit !== undefined ? fmt(f.limit, 0) : '–',
        fmt(f.admitted, 0),
        fmt(f.admittedPerS, 1),
        f.refused ? fmt(f.refused, 0) : '0',
        slash([f.wait.p50, f.wait.p90, f.wait.p99], ms),
        pct(f.slotShare),
        `${f.highest}/${f.limit ?? '–'}${f.limit !== undefined && f.highest > f.limit ? ' **OVER**' : ''}`,
        f.client === c.measured ? ratioText(ratio) : '',
        r
          ? `${Math.max(0, ...Object.values(r.highest))}/${r.params.max}${r.oversold.length ? ' **OVERSOLD**' : ''}`
          : '–',
      ]);
    }
  };
  const configs = new Set<string>();
  for (const r of withClients) {
    const c = r.fleet!.clients!;
    const key = `${c.variant.id}×${r.params.instances}`;
    if (configs.has(key)) continue;
    configs.add(key);
    for (const policy of ['weighted-fair', 'fifo'] as const) {
      row(`${IDEAL_LABEL[policy]} (${c.variant.label}; in memory)`, c, c.ideal[policy]);
    }
  }
  for (const r of withClients) row(r.label, r.fleet!.clients!, r.fleet!.clients!.clients, r);
  return table(
    [
      'run',
      'client',
      'workers',
      'limit',
      'admitted',
      'admissions/s',
      '429s',
      'wait p50 / p90 / p99 ms',
      'share of slot-time',
      'highest in flight/limit (all processes)',
      'p90 ÷ ideal weighted-fair',
      'channel highest/max',
    ],
    rows,
  );
}

export function clientsLegend(): string[] {
  return [
    '',
    'Clients scenario (clients2):',
    '',
    '- **wait**: admitted − the acquire call, for requests arriving in the window (after the settle time); the ' +
      "refused ones are in **429s** (their reasons in the fleet table; `client_*` = the client's own limit).",
    '- **share of slot-time**: the time slots were held for the client inside the window, over the time they were ' +
      'held for anyone.',
    '- **highest in flight/limit**: the most requests of the client holding slots at once across every instance, over ' +
      "the whole run (a sweep over the holders' intervals on the machine-wide monotonic clock, as for oversell), over " +
      'its limit (– for none). **channel highest/max**: the same per channel (oversell above max).',
    '- **ideal weighted-fair**: the same closed loop (workers per client, hold sequences) through a perfect in-memory ' +
      'scheduler where a slot given back goes at once to the waiter whose client holds the fewest slots relative to ' +
      'its weight, the oldest first among equals; **ideal FIFO**: to the oldest waiter whatever its client (a ' +
      "channel queue today). Both with the variant's client limits (a limited client's request first waits for one of " +
      "its own slots, in its client's order, then joins the channel's waiters, as slotgate's acquire does) and no " +
      "time-out. **p90 ÷ ideal weighted-fair**: the light client's p90 wait over the ideal weighted-fair " +
      "scheduler's on the same loop (target ≤ 1.2); **starved**: no admission of the light client in the window.",
  ];
}
