// Runs the randomized model tests (test/model) alone: `npm run test:model -- --runs 2000 --seed 42`. The two flags
// become SLOTGATE_MODEL_RUNS and SLOTGATE_MODEL_SEED (vitest passes unknown arguments poorly); the rest go to vitest.
import { spawnSync } from 'node:child_process';

const FLAGS = { '--runs': 'SLOTGATE_MODEL_RUNS', '--seed': 'SLOTGATE_MODEL_SEED' };
const env = { ...process.env };
const rest = [];
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
  const [flag, inline] = args[i].split('=', 2);
  if (!(flag in FLAGS)) rest.push(args[i]);
  else env[FLAGS[flag]] = inline ?? args[++i];
}
const vitest = ['vitest', 'run', '--project', 'integration', 'test/model', ...rest];
const { status } = spawnSync('npx', vitest, { stdio: 'inherit', env });
process.exit(status ?? 1);
