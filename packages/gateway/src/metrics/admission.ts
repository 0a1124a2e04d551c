/** What admission did on this instance: its outcomes and latency, how passes reached the store, and its leases. */
import { Histogram, Registry } from 'prom-client';
import { OUTCOMES, type AdmissionRecord, type AdmissionStats } from 'slotgate';
import { scrapedCounter, scrapedGauge } from './scrape.js';

const SECONDS_BUCKETS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
];

/** The latency of each admission pass, observed as it ends: built before the engine, which reports to it. */
export class AdmissionLatency {
  readonly registry = new Registry();
  private readonly admissionSeconds = new Histogram({
    name: 'slotgate_admission_duration_seconds',
    help: 'Time from the start of an admission pass to its ticket or error, waiting included',
    labelNames: ['outcome'],
    buckets: SECONDS_BUCKETS,
    registers: [this.registry],
  });
  private readonly waitSeconds = new Histogram({
    name: 'slotgate_wait_duration_seconds',
    help: 'Time admitted requests spent in a wait queue',
    buckets: SECONDS_BUCKETS,
    registers: [this.registry],
  });

  observe = (record: AdmissionRecord): void => {
    this.admissionSeconds.observe({ outcome: record.outcome }, record.latencyMs / 1000);
    if (record.waitedMs !== undefined) this.waitSeconds.observe(record.waitedMs / 1000);
  };
}

/** Engine counters with no label: name, help and the stat that holds the count. */
const TOTALS: Array<[string, string, (s: AdmissionStats) => number]> = [
  [
    'slotgate_acquire_attempts_total',
    'Bounded channels tried by the acquire script',
    (s) => s.acquireAttempts,
  ],
  [
    'slotgate_acquire_calls_total',
    'Acquire requests of admission passes (one may try several channels; on one Redis node the requests of one event-loop turn share one script call)',
    (s) => s.acquireCalls,
  ],
  [
    'slotgate_handoffs_total',
    'Admissions served by a slot this instance released in the same event-loop turn (no Redis command)',
    (s) => s.handoffs,
  ],
  [
    'slotgate_grants_total',
    'Waiters admitted on a slot granted to them, the oldest waiter of a channel first, across every instance',
    (s) => s.grants,
  ],
  [
    'slotgate_leases_lost_total',
    'Leases found missing at renewal (their holder had lost the slot)',
    (s) => s.leasesLost,
  ],
];

/** The engine's admission counters and its live leases, read at scrape time. */
export function registerAdmissionCounters(register: Registry, stats: () => AdmissionStats): void {
  scrapedCounter(register, {
    name: 'slotgate_admissions_total',
    help: 'Admission outcomes of this instance',
    labelNames: ['outcome'],
    read: () => {
      const o = stats().outcomes;
      return OUTCOMES.map((k) => [{ outcome: k }, o[k]]);
    },
  });
  scrapedCounter(register, {
    name: 'slotgate_first_tries_total',
    help: 'Passes that asked the store for a bounded slot, by what the first channel tried answered (full includes queued)',
    labelNames: ['result'],
    read: () => {
      const s = stats();
      return [
        [{ result: 'free' }, s.firstTries - s.firstTriesFull],
        [{ result: 'full' }, s.firstTriesFull],
      ];
    },
  });
  for (const [name, help, count] of TOTALS)
    scrapedCounter(register, { name, help, read: () => [[{}, count(stats())]] });
  scrapedGauge(register, {
    name: 'slotgate_live_leases',
    help: 'Leases this instance holds',
    read: () => [[{}, stats().liveLeases]],
  });
}
