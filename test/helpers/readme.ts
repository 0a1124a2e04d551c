/**
 * The README's library quick start as the tests run it: the first ```ts block under "## Library quick start", and the
 * output the README shows for it (the first ```text block after that code).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const HEADING = '## Library quick start';

export interface QuickStart {
  code: string;
  expected: string;
}

export function quickStartOf(readme: string): QuickStart {
  const start = readme.indexOf(`\n${HEADING}\n`);
  if (start < 0) throw new Error(`README.md has no "${HEADING}" heading`);
  const end = readme.indexOf('\n## ', start + HEADING.length + 2);
  const section = readme.slice(start, end < 0 ? undefined : end);
  const code = /^```ts\n([\s\S]*?)^```$/m.exec(section);
  if (!code) throw new Error(`README.md has no \`\`\`ts block under "${HEADING}"`);
  const expected = /^```text\n([\s\S]*?)^```$/m.exec(section.slice(code.index + code[0].length));
  if (!expected)
    throw new Error(`README.md has no \`\`\`text block (the expected output) after the quick start`);
  return { code: code[1]!, expected: expected[1]! };
}

export async function readmeQuickStart(): Promise<QuickStart> {
  return quickStartOf(await readFile(join(ROOT, 'README.md'), 'utf8'));
}
