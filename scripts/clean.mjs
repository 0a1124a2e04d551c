// Removes a build output folder, so files of deleted sources never ship in a package.
import { rmSync } from 'node:fs';

for (const dir of process.argv.slice(2)) rmSync(dir, { recursive: true, force: true });
