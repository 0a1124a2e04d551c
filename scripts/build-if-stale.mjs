// `npm start`'s prestart: runs `npm run build` only when a package's dist/ is missing or older than what it is built
// from, so a second start does not wait for tsc. A package is stale when a file under its src/ has no output in dist/
// (a .ts without its .js, an asset without its copy), or when its newest input (src/**, package.json,
// tsconfig.build.json, the root tsconfig.json and package-lock.json) is newer than its oldest file in dist/.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const PACKAGES = ['packages/slotgate', 'packages/gateway'];
const SHARED_INPUTS = ['tsconfig.json', 'package-lock.json'];
const ASSET = /\.(lua|yaml|html|css)$/;

function files(dir) {
  const out = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...files(path));
    else out.push(path);
  }
  return out;
}

const mtime = (path) => statSync(path).mtimeMs;

/** Why the package needs a build, or undefined when its dist/ is up to date. */
function staleness(pkg) {
  const src = join(ROOT, pkg, 'src');
  const dist = join(ROOT, pkg, 'dist');
  if (!existsSync(dist)) return 'no dist/';
  const sources = files(src);
  for (const path of sources) {
    const rel = relative(src, path);
    const output = rel.endsWith('.ts') && !rel.endsWith('.d.ts') ? rel.replace(/\.ts$/, '.js') : rel;
    if ((output !== rel || ASSET.test(rel)) && !existsSync(join(dist, output)))
      return `${pkg}/dist/${output} is missing`;
  }
  const inputs = [
    ...sources,
    join(ROOT, pkg, 'package.json'),
    join(ROOT, pkg, 'tsconfig.build.json'),
    ...SHARED_INPUTS.map((f) => join(ROOT, f)).filter((f) => existsSync(f)),
  ];
  const newest = inputs.reduce((a, p) => Math.max(a, mtime(p)), 0);
  const oldest = files(dist).reduce((a, p) => Math.min(a, mtime(p)), Infinity);
  return newest > oldest ? `${pkg} changed since its last build` : undefined;
}

const reasons = PACKAGES.map(staleness).filter((r) => r !== undefined);
if (reasons.length === 0) {
  console.log('build is up to date (dist/ newer than every source): skipping it');
} else {
  console.log(`building: ${reasons.join('; ')}`);
  const { status } = spawnSync('npm', ['run', 'build'], {
    cwd: ROOT,
    stdio: 'inherit',
    shell: process.platform === 'win32',
  });
  process.exit(status ?? 1);
}
