/**
 * `npm run bench -- --only adaptive`: the runs of a grid one after the other on one private redis-server, each
 * schedule and loop printed as its runs finish, an SVG per run and every run (with its samples) as JSON in the output
 * directory.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ROOT, tempDir } from '../../test/helpers/gw-gateway.js';
import { RedisServer } from '../../test/helpers/redis-server.js';
import { runsOf, scaled, SETTLE_MS, type Grid } from './config.js';
import { adaptiveParams, adaptiveSection } from './report.js';
import { runAdaptive, type AdaptiveRun } from './run.js';
import { adaptiveSvg, svgName } from './svg.js';

export const ADAPTIVE_ID = 'adaptive';

export interface AdaptiveOptions {
  /** @default 'full' */
  grid?: Grid;
  /** Every schedule this many times faster, the settling time too (a smoke test). @default 1 */
  timeScale?: number;
  /** @default 1 */
  seed?: number;
  /** Directory for the SVGs and the JSON; none written when undefined. */
  outDir?: string;
  out: (text: string) => void;
  progress: (text: string) => void;
}

export async function runAdaptiveGrid(o: AdaptiveOptions) {
  const grid = o.grid ?? 'full';
  const scale = o.timeScale ?? 1;
  const seed = o.seed ?? 1;
  const settleMs = SETTLE_MS / scale;
  const specs = runsOf(grid);
  const totalS = specs.reduce((a, s) => a + s.schedule.phases.at(-1)! / 1000 / scale, 0);
  // the gateways run from dist/ (a source start through tsx costs seconds per process): built first if stale
  execFileSync(process.execPath, [join(ROOT, 'scripts/build-if-stale.mjs')], { stdio: 'ignore' });
  o.out(`\n## Adaptive limits: a hidden-capacity upstream\n\n${adaptiveParams(grid, settleMs, seed, scale)}`);
  o.progress(`adaptive: ${specs.length} runs, ${Math.round(totalS)} s of load plus the gateways' start-ups`);
  const redis = await RedisServer.start();
  const dir = await tempDir();
  const runs: AdaptiveRun[] = [];
  const failures: string[] = [];
  try {
    if (o.outDir) await mkdir(o.outDir, { recursive: true });
    let group: AdaptiveRun[] = [];
    for (const [i, spec] of specs.entries()) {
      const what = `${spec.schedule.id} / ${spec.loop} / ${spec.contender.id} × ${spec.instances}`;
      o.progress(`… adaptive ${what}`);
      try {
        const run = await runAdaptive(spec, {
          redisUrl: redis.url,
          prefix: `ad${i}`,
          configDir: dir.dir,
          bin: join(ROOT, 'packages/gateway/dist/cli/main.js'),
          settleMs,
          schedule: scaled(spec.schedule, scale),
          seed,
        });
        if (o.outDir) {
          run.svg = svgName(run);
          await writeFile(join(o.outDir, run.svg), adaptiveSvg(run));
        }
        runs.push(run);
        group.push(run);
      } catch (err) {
        failures.push(`adaptive ${what} failed: ${err instanceof Error ? err.message : String(err)}`);
        o.progress(failures.at(-1)!);
      }
      const next = specs[i + 1];
      if (group.length && (next?.schedule !== spec.schedule || next.loop !== spec.loop)) {
        o.out(`\n${adaptiveSection(spec.schedule, spec.loop, group)}`);
        group = [];
      }
    }
    if (o.outDir && runs.length) {
      const file = join(o.outDir, `adaptive-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
      await writeFile(file, `${JSON.stringify({ grid, scale, settleMs, seed, runs, failures }, null, 2)}\n`);
      o.out(`\nWrote ${file} and an SVG per run beside it.`);
    }
    return { runs, failures };
  } finally {
    await redis.stop();
    await dir.remove();
  }
}
