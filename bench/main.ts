/**
 * `npm run bench`: every scenario against slotgate, its rollback mode, redis-semaphore and Bottleneck on one Redis,
 * run from the source. Results go to bench/results/.
 *
 *   npm run bench -- [--only W1,W4,open200,fleetsim] [--duration 3] [--open-duration 10] [--contenders slotgate,redis-semaphore]
 *                    [--redis URL] [--fleetsim-grid full|quick] [--fleetsim-duration 10]
 */
import { benchCommand } from './cli.js';

await benchCommand().parseAsync(process.argv);
