/**
 * The examples of the documentation work with the real packages: every ```ts block of the READMEs and docs/*.md is
 * type-checked as a module file of its own, all of them in one program, with the repository's compiler options and
 * `slotgate` / `slotgate-gateway` resolved to their sources through the `slotgate-source` condition (as
 * tsconfig.json does); a block that does not compile fails with its diagnostics, located in the page. (The README's
 * config file for real providers is examples/slotgate.yaml, loaded and served by test/integration/example-config.test.ts.)
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));

/** The pages whose ```ts blocks are checked. */
const PAGES = [
  'README.md',
  'packages/slotgate/README.md',
  'packages/gateway/README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

interface Block {
  page: string;
  /** Line of the page (1-based) where the block's first line of code is. */
  line: number;
  /** A file name next to the page that no real file has: the block compiles as if it were there. */
  file: string;
  code: string;
}

/** Every ```ts block of a page, its fence's indentation (a block inside a list item) taken off each line. */
function blocksOf(page: string): Block[] {
  const text = readFileSync(join(ROOT, page), 'utf8');
  const fence = /^( *)```ts\n([\s\S]*?)^\1```$/gm;
  return [...text.matchAll(fence)].map((m) => {
    const line = text.slice(0, m.index).split('\n').length + 1;
    const indent = m[1]!.length;
    const code = m[2]!
      .split('\n')
      .map((l) => l.slice(Math.min(indent, l.length - l.trimStart().length)))
      .join('\n');
    return { page, line, file: join(ROOT, `${page}.line-${line}.ts`), code };
  });
}

/** A block that must not compile: the checker reaches the real packages and reports what is wrong. */
const CANARY = `import { createAdmission, MemoryStore } from 'slotgate';
import { createGateway } from 'slotgate-gateway';
const admission = createAdmission({ store: new MemoryStore(), settings: { wait_timeout_ms: 'soon' } });
await admission.acquire({ candidates: [{ id: 'a', maxConcurrency: '4' }] });
await createGateway({ config: 'demo.yaml' });
`;

function compilerOptions(): ts.CompilerOptions {
  const file = join(ROOT, 'tsconfig.json');
  const read = ts.readConfigFile(file, (path) => ts.sys.readFile(path));
  if (read.error) throw new Error(ts.flattenDiagnosticMessageText(read.error.messageText, '\n'));
  const parsed = ts.parseJsonConfigFileContent(read.config, ts.sys, ROOT, undefined, file);
  return { ...parsed.options, noEmit: true };
}

/** One program over every block (and the canary), each a virtual module file next to its page. */
function check(blocks: readonly Block[], canaryFile: string) {
  const options = compilerOptions();
  const virtual = new Map<string, string>(blocks.map((b) => [b.file, b.code]));
  virtual.set(canaryFile, CANARY);
  const host = ts.createCompilerHost(options, true);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, language, onError, create) => {
    const code = virtual.get(name);
    return code === undefined
      ? getSourceFile(name, language, onError, create)
      : ts.createSourceFile(name, code, language, true);
  };
  host.fileExists = (name) => virtual.has(name) || ts.sys.fileExists(name);
  host.readFile = (name) => virtual.get(name) ?? ts.sys.readFile(name);
  const program = ts.createProgram({ rootNames: [...virtual.keys()], options, host });
  const diagnosticsOf = (file: string) => {
    const source = program.getSourceFile(file)!;
    return [...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source)];
  };
  return { program, diagnosticsOf };
}

/** `docs/api.md:120:5 TS2345 message`, the line and column counted in the page. */
function describeDiagnostic(block: Block, d: ts.Diagnostic): string {
  const message = ts.flattenDiagnosticMessageText(d.messageText, '\n');
  if (!d.file || d.start === undefined)
    return `${block.page} (block at line ${block.line}): TS${d.code} ${message}`;
  const { line, character } = d.file.getLineAndCharacterOfPosition(d.start);
  return `${block.page}:${block.line + line}:${character + 1} TS${d.code} ${message}`;
}

describe('the TypeScript examples of the documentation', () => {
  const blocks = PAGES.flatMap(blocksOf);
  const canaryFile = join(ROOT, 'docs', 'canary.line-1.ts');
  const { program, diagnosticsOf } = check(blocks, canaryFile);

  it('finds the examples of docs/api.md, and resolves both packages to their sources', () => {
    expect(blocks.filter((b) => b.page === 'docs/api.md').length).toBeGreaterThanOrEqual(3);
    for (const entry of ['packages/slotgate/src/index.ts', 'packages/gateway/src/index.ts']) {
      expect(program.getSourceFile(join(ROOT, entry)), entry).toBeDefined();
    }
  });

  it('reports a block that does not compile (so the next test cannot pass vacuously)', () => {
    // one error on each of the canary's last three lines: a string where the packages' types want something else
    const lines = diagnosticsOf(canaryFile).map(
      (d) => d.file!.getLineAndCharacterOfPosition(d.start!).line + 1,
    );
    expect(lines).toEqual([3, 4, 5]);
  });

  it('compiles every ```ts block of the READMEs and docs/*.md', () => {
    expect(program.getOptionsDiagnostics().map((d) => d.messageText)).toEqual([]);
    const problems = blocks.flatMap((b) => diagnosticsOf(b.file).map((d) => describeDiagnostic(b, d)));
    expect(problems, 'type errors in documentation examples').toEqual([]);
  });
});
