/**
 * Starts one private redis-server for the whole run (or uses REDIS_URL) and hands its URL to the tests.
 * A missing redis-server fails the run with an install hint; Redis tests are never skipped silently.
 */
import type { TestProject } from 'vitest/node';
import { RedisServer } from './redis-server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  if (process.env.REDIS_URL) {
    project.provide('redisUrl', process.env.REDIS_URL);
    return async () => {};
  }
  const server = await RedisServer.start();
  project.provide('redisUrl', server.url);
  return () => server.stop();
}
