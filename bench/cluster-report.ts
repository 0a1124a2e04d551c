/**
 * The cluster beside the single node: every run made on both topologies in one benchmark run (same scenario, same
 * contender), side by side, with the ratios — on the cluster, admissions/s per slot ≥ 0.9 × single node and
 * Redis commands per admission ≤ 1.5 × single node, with zero oversell — and what each master spent.
 */
import { figures, fmt, table } from './report.js';
import type { RunRecord } from './run.js';
import type { TargetResult } from './targets.js';

export const PER_SLOT_TARGET = 0.9;
export const COMMANDS_TARGET = 1.5;

/** Slots of a run: channels × max. */
const slotsOf = (r: RunRecord) => r.params.channels * r.params.max;

interface Pair {
  single: RunRecord | undefined;
  cluster: RunRecord;
}

/** Each cluster run with the single-node run of the same scenario and contender, if there is one. */
export function pairs(runs: readonly RunRecord[]): Pair[] {
  return runs
    .filter((r) => r.topology === 'cluster')
    .map((cluster) => ({
      cluster,
      single: runs.find(
        (r) => !r.topology && r.scenario === cluster.scenario && r.contender === cluster.contender,
      ),
    }));
}

function ratios(p: Pair) {
  const c = figures(p.cluster);
  const s = p.single && figures(p.single);
  return {
    c,
    s,
    perSlot: s ? c.admPerS / slotsOf(p.cluster) / (s.admPerS / slotsOf(p.single!)) : NaN,
    commands: s ? c.cmdsPerAdm / s.cmdsPerAdm : NaN,
  };
}

const highest = (r: RunRecord | undefined) =>
  r ? `${figures(r).highestMax}/${r.params.max}${r.oversold.length ? ' **OVERSOLD**' : ''}` : '–';

/** Each master's commands per admission and CPU %, in one cell each ("a / b / c"). */
function perNode(r: RunRecord) {
  const adm = Math.max(1, r.admissions);
  const nodes = r.perNode ?? [];
  return {
    commands: nodes.map((n) => fmt(n.commands / adm, 2)).join(' / '),
    cpu: nodes.map((n) => fmt((n.cpuMs / (r.windowS * 1000)) * 100, 1)).join(' / '),
  };
}

export function clusterTable(
  runs: readonly RunRecord[],
  notOnCluster: readonly string[] = [],
): string | undefined {
  const all = pairs(runs);
  if (all.length === 0) return undefined;
  const rows = all.map((p) => {
    const { c, s, perSlot, commands } = ratios(p);
    const n = perNode(p.cluster);
    return [
      p.cluster.scenario,
      p.cluster.label,
      `${s ? fmt(s.admPerS, 0) : '–'} / ${fmt(c.admPerS, 0)}`,
      `${s ? fmt(s.admPerS / slotsOf(p.single!), 1) : '–'} / ${fmt(c.admPerS / slotsOf(p.cluster), 1)}`,
      fmt(perSlot, 2),
      `${s ? fmt(s.cmdsPerAdm, 2) : '–'} / ${fmt(c.cmdsPerAdm, 2)}`,
      fmt(commands, 2),
      n.commands,
      `${s ? fmt(s.cpuUsPerAdm, 1) : '–'} / ${fmt(c.cpuUsPerAdm, 1)}`,
      n.cpu,
      `${p.single ? fmt(p.single.latency.p99, 1) : '–'} / ${fmt(p.cluster.latency.p99, 1)}`,
      `${highest(p.single)} / ${highest(p.cluster)}`,
    ];
  });
  for (const label of notOnCluster) rows.push(['–', label, ...Array<string>(10).fill('n/a')]);
  return table(
    [
      'scenario',
      'contender',
      'admissions/s single / cluster',
      'admissions/s per slot single / cluster',
      `per-slot ratio (≥ ${PER_SLOT_TARGET})`,
      'Redis cmds/adm single / cluster (all nodes)',
      `cmds ratio (≤ ${COMMANDS_TARGET})`,
      'cluster cmds/adm per master',
      'Redis CPU µs/adm single / cluster (all nodes)',
      'cluster Redis CPU % per master',
      'p99 ms single / cluster',
      'highest/max single / cluster',
    ],
    rows,
  );
}

/** The cluster targets for slotgate (defaults) on every scenario run on both topologies, and oversell. */
export function clusterTargets(runs: readonly RunRecord[]): TargetResult[] {
  const all = pairs(runs);
  if (all.length === 0) return [];
  const out: TargetResult[] = [];
  for (const p of all.filter((x) => x.cluster.contender === 'slotgate')) {
    const id = p.cluster.scenario;
    const { c, s, perSlot, commands } = ratios(p);
    if (!s) {
      out.push({ target: `Cluster vs single node in ${id}`, measured: 'no single-node run', verdict: 'n/a' });
      continue;
    }
    out.push({
      target: `Cluster, ${id}: admissions/s per slot ≥ ${PER_SLOT_TARGET} × single node`,
      measured: `${fmt(c.admPerS / slotsOf(p.cluster), 1)} vs ${fmt(s.admPerS / slotsOf(p.single!), 1)} /s = ${fmt(perSlot, 3)} ×`,
      verdict: perSlot >= PER_SLOT_TARGET ? 'PASS' : 'MISS',
    });
    out.push({
      target: `Cluster, ${id}: Redis commands per admission ≤ ${COMMANDS_TARGET} × single node`,
      measured: `${fmt(c.cmdsPerAdm, 2)} vs ${fmt(s.cmdsPerAdm, 2)} = ${fmt(commands, 3)} ×`,
      verdict: commands <= COMMANDS_TARGET ? 'PASS' : 'MISS',
    });
  }
  const oversold = all.filter((p) => p.cluster.oversold.length > 0);
  out.push({
    target: 'Zero oversell on the cluster',
    measured: oversold.length
      ? oversold.map((p) => `${p.cluster.scenario}/${p.cluster.contender}`).join(', ')
      : `${all.length} runs, highest concurrency ≤ max on every channel`,
    verdict: oversold.length ? 'MISS' : 'PASS',
  });
  return out;
}

export function clusterLegend(): string {
  return [
    '- **single / cluster**: the same scenario and contender measured on the private single node and on the private ' +
      '3-master cluster in this run (both on this machine; every cluster node is a redis-server process of its own).',
    '- **admissions/s per slot**: admissions/s divided by the slots of the scenario (channels × max); the ratio is ' +
      "cluster / single node. **cmds ratio**: cluster / single node of Redis commands per admission, the cluster's " +
      'summed over its masters (`INFO commandstats` of each, Lua-internal commands included).',
    '- **per master**: each master in the order of its address; commands per admission of the whole run, and the ' +
      "share of one core its Redis process used. A channel's keys share one hash slot (one master); how evenly the " +
      'channels spread shows here.',
  ].join('\n');
}
