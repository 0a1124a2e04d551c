/** The closed-loop scenarios (W1–W4, W1-75, scale, http); the fleet scenarios are in openloop.ts. */
import { seededRandom } from './draws.js';
import type { BenchChannel } from './types.js';

export type ScenarioKind = 'load' | 'scale' | 'http';

export interface Scenario {
  id: string;
  kind: ScenarioKind;
  title: string;
  channels: number;
  max: number;
  /** Concurrent acquirers (load, scale: in total, split evenly over the instances) or HTTP connections. */
  acquirers: number;
  holdMs: number;
  /** 'one': every request offers all channels; otherwise `count` overlapping sets of `min`–`max` channels. */
  sets: 'one' | { count: number; min: number; max: number; seed: number };
  /** Instance counts (processes) to run; [1] = in the benchmark process. */
  instances: number[];
}

const W1 = {
  kind: 'load' as const,
  channels: 50,
  max: 4,
  acquirers: 150,
  holdMs: 20,
  sets: 'one' as const,
  instances: [1],
};

export const SCENARIOS: readonly Scenario[] = [
  { ...W1, id: 'W1', title: 'W1 unsaturated' },
  {
    ...W1,
    id: 'W2',
    acquirers: 300,
    title: 'W2 saturated (300 acquirers for 200 slots: waiting, queue-full and 429 paths)',
  },
  {
    ...W1,
    id: 'W3',
    sets: { count: 20, min: 10, max: 30, seed: 7 },
    title: 'W3 many candidate sets (20 overlapping sets of 10–30 of the 50 channels)',
  },
  { ...W1, id: 'W4', holdMs: 0, title: "W4 hold 0 (the admission path's own throughput)" },
  { ...W1, id: 'W1-75', acquirers: 75, title: 'W1 at 75 acquirers (offered-load sweep: 75 / 150 / 300)' },
  {
    ...W1,
    id: 'scale',
    kind: 'scale',
    instances: [1, 2, 4],
    title: 'Scale-out: W1 on 1, 2 and 4 instances (processes), 150 acquirers in total',
  },
  {
    ...W1,
    id: 'http',
    kind: 'http',
    instances: [1, 2],
    title: 'HTTP: the gateway in front of an upstream that holds each request 20 ms',
  },
];

export function findScenario(id: string): Scenario | undefined {
  return SCENARIOS.find((s) => s.id.toLowerCase() === id.toLowerCase());
}

/** Instance i's share of the scenario's acquirers (or connections), split as evenly as possible over `instances`. */
export function acquirersOf(s: Scenario, instances: number, i: number): number {
  return Math.floor(s.acquirers / instances) + (i < s.acquirers % instances ? 1 : 0);
}

/** Channels c0, c1, … of one max. */
export function channelsOf(s: { channels: number; max: number }): BenchChannel[] {
  return Array.from({ length: s.channels }, (_, i) => ({ id: `c${i}`, max: s.max }));
}

export function candidateSetsOf(s: Scenario, channels: readonly BenchChannel[]): BenchChannel[][] {
  if (s.sets === 'one') return [[...channels]];
  const random = seededRandom(s.sets.seed);
  const sets: BenchChannel[][] = [];
  for (let k = 0; k < s.sets.count; k++) {
    const size = s.sets.min + Math.floor(random() * (s.sets.max - s.sets.min + 1));
    const pool = [...channels];
    for (let i = pool.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [pool[i], pool[j]] = [pool[j]!, pool[i]!];
    }
    sets.push(pool.slice(0, size).sort((a, b) => Number(a.id.slice(1)) - Number(b.id.slice(1))));
  }
  return sets;
}

export function describeSets(s: Scenario): string {
  return s.sets === 'one'
    ? `one candidate set (all ${s.channels})`
    : `${s.sets.count} overlapping candidate sets of ${s.sets.min}–${s.sets.max} channels (seeded)`;
}
