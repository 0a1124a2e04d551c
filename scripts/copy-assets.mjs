// Copies the non-TypeScript files that a package's src/ loads at run time (Lua scripts, demo config, dashboard)
// into its dist/. Run from the package's folder.
import { cpSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

const ASSET = /\.(lua|yaml|html|css)$/;
function walk(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (ASSET.test(name)) cpSync(path, join('dist', relative('src', path)));
  }
}
walk('src');
