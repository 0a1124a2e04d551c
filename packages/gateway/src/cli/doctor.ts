/** `slotgate doctor --redis URL [--prefix P] [--fix]`: exit 1 when leftover keys are found. */
import { Redis } from 'ioredis';
import { checkLeftovers, formatLeftoverReport as formatReport } from 'slotgate';

export interface DoctorOptions {
  redis?: string;
  prefix: string;
  fix?: boolean;
  json?: boolean;
}

export async function doctor(opts: DoctorOptions, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const url = opts.redis ?? env.REDIS_URL;
  if (!url) {
    console.error('slotgate doctor: give --redis URL (or set REDIS_URL)');
    return 2;
  }
  const client = new Redis(url, { maxRetriesPerRequest: 1, connectTimeout: 3000, retryStrategy: () => null });
  client.on('error', () => {});
  try {
    const report = await checkLeftovers(client, opts.prefix, opts.fix === true);
    console.log(opts.json ? JSON.stringify(report, null, 2) : formatReport(report, opts.fix === true));
    return report.findings.length > 0 && !opts.fix ? 1 : 0;
  } catch (err) {
    console.error(`slotgate doctor: ${(err as Error).message}`);
    return 2;
  } finally {
    client.disconnect();
  }
}
