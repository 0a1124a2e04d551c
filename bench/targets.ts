/**
 * The acceptance targets, evaluated on one run's numbers: every ratio compares contenders measured in the same run on
 * the same machine, so a busy machine moves both sides of it.
 */
import { evaluateFleetTargets } from './fleet-targets.js';
import { figures, fmt, table } from './report.js';
import type { RunRecord } from './run.js';

export interface TargetResult {
  target: string;
  measured: string;
  verdict: 'PASS' | 'MISS' | 'n/a';
}

export function evaluateTargets(runs: readonly RunRecord[]): TargetResult[] {
  const find = (scenario: string, contender: string) =>
    runs.find((r) => r.scenario === scenario && r.contender === contender);
  const out: TargetResult[] = [];
  const na = (target: string, why: string) => out.push({ target, measured: why, verdict: 'n/a' });
  const cpuRatio = (peer: string, limit: number, peerName: string, self = 'slotgate') => {
    const who = self === 'slotgate' ? 'slotgate' : `${self} (shown, not a target)`;
    const target = `Redis CPU per admission in W1: ${who} ≤ ${limit} × ${peerName}`;
    const a = find('W1', self);
    const b = find('W1', peer);
    if (!a || !b) return na(target, 'not run');
    const ratio = figures(a).cpuUsPerAdm / figures(b).cpuUsPerAdm;
    out.push({
      target,
      measured: `${fmt(figures(a).cpuUsPerAdm, 1)} vs ${fmt(figures(b).cpuUsPerAdm, 1)} µs/adm = ${fmt(ratio, 3)} ×`,
      verdict: ratio <= limit ? 'PASS' : 'MISS',
    });
  };
  cpuRatio('redis-semaphore', 0.6, 'redis-semaphore');
  cpuRatio('slotgate-rollback', 0.2, 'rollback mode');
  cpuRatio('bottleneck', 0.1, 'Bottleneck');
  // The admission path's own cost without slot handoff, next to the defaults'.
  if (find('W1', 'slotgate-no-handoff'))
    cpuRatio('redis-semaphore', 0.6, 'redis-semaphore', 'slotgate-no-handoff');

  // The load view's read budget is measured on the load view itself: with slot handoff most W1 passes take a slot
  // over before reading any load, so the defaults' read rate follows the handoff rate, not the view's bound.
  const lvId = find('W1', 'slotgate-no-handoff') ? 'slotgate-no-handoff' : 'slotgate';
  const lvNote = lvId === 'slotgate' ? '' : ' (load view measured with slot handoff off)';
  const w1 = find('W1', lvId);
  const w1Defaults = find('W1', 'slotgate');
  if (lvId !== 'slotgate' && w1Defaults) {
    const v = figures(w1Defaults).loadReadPerSPerInstance;
    out.push({
      target: 'Load-read commands/s per instance in W1 ≤ 755 (defaults)',
      measured: `${fmt(v, 0)} /s`,
      verdict: v <= 755 ? 'PASS' : 'MISS',
    });
  }
  {
    const target = `Load-read commands/s per instance in W1 ≤ 755${lvNote}`;
    if (!w1) na(target, 'not run');
    else {
      const v = figures(w1).loadReadPerSPerInstance;
      out.push({ target, measured: `${fmt(v, 0)} /s`, verdict: v <= 755 ? 'PASS' : 'MISS' });
    }
  }
  {
    const target = `Load-read commands/s within ±20 % between 75 and 300 acquirers (vs 150)${lvNote}`;
    const at75 = find('W1-75', lvId);
    const at300 = find('W2', lvId);
    if (!w1 || !at75 || !at300) na(target, 'needs W1-75, W1 and W2');
    else {
      const base = figures(w1).loadReadPerSPerInstance;
      const d75 = figures(at75).loadReadPerSPerInstance / base - 1;
      const d300 = figures(at300).loadReadPerSPerInstance / base - 1;
      const pct = (d: number) => `${d >= 0 ? '+' : ''}${fmt(100 * d, 1)} %`;
      out.push({
        target,
        measured: `75: ${fmt(figures(at75).loadReadPerSPerInstance, 0)} (${pct(d75)}), 150: ${fmt(base, 0)}, 300: ${fmt(figures(at300).loadReadPerSPerInstance, 0)} (${pct(d300)})`,
        verdict: Math.abs(d75) <= 0.2 && Math.abs(d300) <= 0.2 ? 'PASS' : 'MISS',
      });
    }
  }
  {
    const target = `Load-read commands/s per channel in W3 ≤ W1${lvNote}`;
    const w3 = find('W3', lvId);
    if (!w1 || !w3) na(target, 'needs W1 and W3');
    else {
      const a = figures(w3).loadReadPerSPerInstance / w3.params.channels;
      const b = figures(w1).loadReadPerSPerInstance / w1.params.channels;
      out.push({
        target,
        measured: `${fmt(a, 2)} vs ${fmt(b, 2)} /s per channel`,
        verdict: a <= b ? 'PASS' : 'MISS',
      });
    }
  }
  {
    const target = "Admissions/s in W4 ≥ redis-semaphore's";
    const a = find('W4', 'slotgate');
    const b = find('W4', 'redis-semaphore');
    if (!a || !b) na(target, 'not run');
    else {
      const ratio = figures(a).admPerS / figures(b).admPerS;
      out.push({
        target,
        measured: `${fmt(figures(a).admPerS, 0)} vs ${fmt(figures(b).admPerS, 0)} /s = ${fmt(ratio, 2)} ×`,
        verdict: ratio >= 1 ? 'PASS' : 'MISS',
      });
    }
  }
  {
    const target = "Admission p99 in W1 ≤ redis-semaphore's";
    const b = find('W1', 'redis-semaphore');
    if (!w1Defaults || !b) na(target, 'not run');
    else {
      out.push({
        target,
        measured: `${fmt(w1Defaults.latency.p99, 2)} vs ${fmt(b.latency.p99, 2)} ms`,
        verdict: w1Defaults.latency.p99 <= b.latency.p99 ? 'PASS' : 'MISS',
      });
    }
    const nh = find('W1', 'slotgate-no-handoff');
    if (nh && b && lvId !== 'slotgate') {
      out.push({
        target: "Admission p99 in W1: slotgate-no-handoff (shown, not a target) ≤ redis-semaphore's",
        measured: `${fmt(nh.latency.p99, 2)} vs ${fmt(b.latency.p99, 2)} ms`,
        verdict: nh.latency.p99 <= b.latency.p99 ? 'PASS' : 'MISS',
      });
    }
  }
  if (runs.some((r) => r.fleet)) out.push(...evaluateFleetTargets(runs).filter((t) => t.verdict !== 'n/a'));
  {
    const oversold = runs.filter((r) => r.oversold.length > 0);
    out.push({
      target: 'Zero oversell in every scenario and contender',
      measured: oversold.length
        ? oversold.map((r) => `${r.scenario}/${r.contender}`).join(', ')
        : `${runs.length} runs, highest concurrency ≤ max on every channel`,
      verdict: runs.length === 0 ? 'n/a' : oversold.length ? 'MISS' : 'PASS',
    });
  }
  return out;
}

export function targetsTable(targets: readonly TargetResult[]): string {
  return table(
    ['target (issue, ratios within this run)', 'measured', 'verdict'],
    targets.map((t) => [t.target, t.measured, t.verdict === 'PASS' ? 'PASS' : `**${t.verdict}**`]),
  );
}
