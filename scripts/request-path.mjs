// The source files one admission and its release run code in, on a RedisStore (docs/admission.md, "The path of one
// request"). V8's precise coverage counts calls per function: after a warm-up (connection, scripts loaded, the load
// summary read) the counters are reset, one acquire and its release run, and every library function called since is
// listed by file. Run after `npm run build`: `node scripts/request-path.mjs` (REDIS_URL, else a private
// redis-server on a free port).
import { spawn } from 'node:child_process';
import { Session } from 'node:inspector/promises';
import { createServer } from 'node:net';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DIST = `${ROOT}packages/slotgate/dist/`;

async function freePort() {
  const server = createServer().listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function privateRedis() {
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--save', '', '--appendonly', 'no'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise((resolve, reject) => {
    child.once('error', reject);
    child.stdout.on('data', (chunk) => /Ready to accept/.test(String(chunk)) && resolve());
  });
  return { url: `redis://127.0.0.1:${port}`, stop: () => child.kill() };
}

const redis = process.env.REDIS_URL ? { url: process.env.REDIS_URL, stop() {} } : await privateRedis();
const { createAdmission, RedisStore } = await import(`${DIST}index.js`);
const store = new RedisStore({ url: redis.url, prefix: `path-${process.pid}` });
const admission = createAdmission({ store });
const candidates = [{ id: 'ch-a', maxConcurrency: 4 }];
const once = async () => {
  const ticket = await admission.acquire({ candidates });
  await ticket.release();
  // let the release's turn go out: an acquire in the same turn would take the slot over with no store command
  await new Promise((resolve) => setTimeout(resolve, 50));
};

const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false });
for (let i = 0; i < 3; i++) await once();

/** Library file → functions called during one acquire + release. */
async function measured() {
  await session.post('Profiler.takePreciseCoverage'); // resets the counters
  await once();
  const { result } = await session.post('Profiler.takePreciseCoverage');
  const files = new Map();
  for (const script of result) {
    if (!script.url.startsWith(`file://${DIST}`)) continue;
    const file = relative(ROOT, fileURLToPath(script.url)).replace('/dist/', '/src/').replace(/\.js$/, '.ts');
    const called = script.functions
      .filter((f) => f.functionName && f.ranges[0].count > 0)
      .map((f) => f.functionName);
    if (called.length > 0) files.set(file, [...new Set(called)]);
  }
  return files;
}

// several requests: a file in every one is on the path; the rest ran for a periodic job that fell due (a load report)
const RUNS = 8;
const runs = [];
for (let i = 0; i < RUNS; i++) runs.push(await measured());
await session.post('Profiler.stopPreciseCoverage');
const all = [...new Set(runs.flatMap((files) => [...files.keys()]))].sort();
const always = all.filter((file) => runs.every((files) => files.has(file)));
console.log(
  `one acquire + release on a RedisStore, ${RUNS} requests: ${always.length} library files in every one`,
);
for (const file of always) console.log(`  ${file}: ${runs[0].get(file).join(', ')}`);
const sometimes = all.filter((file) => !always.includes(file));
console.log(`${sometimes.length} more in some of them:`);
for (const file of sometimes) {
  const seen = runs.filter((files) => files.has(file));
  console.log(`  ${file} (${seen.length}/${RUNS}): ${seen[0].get(file).join(', ')}`);
}

await admission.close();
await store.close();
redis.stop();
