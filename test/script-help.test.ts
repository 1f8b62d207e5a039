import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { onceTest } from './fixtures/node-lines.js';

const test = onceTest("every script's --help text");

/*
 * Every script directly under bench/ and scripts/ answers --help on stdout with exit 0 and
 * no stack trace, listing each option it parses (those marked hidden, a forked child's
 * internal role, aside); a Node.js script refuses an unknown option with one line and its
 * usage, exit 2. Subfolders (bench/lib, scripts/lib, scripts/chaos) hold the modules these
 * scripts import or fork: they carry no shebang, checked below, so none is a script of its own.
 */
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const scripts = ['bench', 'scripts'].flatMap((dir) =>
  readdirSync(join(root, dir), { withFileTypes: true })
    .filter((e) => e.isFile() && /\.(mjs|sh)$/.test(e.name))
    .map((e) => `${dir}/${e.name}`),
);

/** Each option of a script's parseCli call: its name and the text of its spec. */
function optionSpecs(file: string): { name: string; spec: string }[] {
  const text = readFileSync(join(root, file), 'utf8');
  const start = text.indexOf('parseCli({');
  if (start < 0) return [];
  const lines = text.slice(start, text.indexOf('\n});', start) >>> 0 || undefined).split('\n');
  const first = lines.findIndex((l) => /^\s*options: \{$/.test(l));
  if (first < 0) return [];
  const indent = /^\s*/.exec(lines[first + 1]!)![0];
  const specs: { name: string; spec: string }[] = [];
  for (const line of lines.slice(first + 1)) {
    const lead = /^\s*/.exec(line)![0].length;
    if (line.trim() !== '' && lead < indent.length) break; // the options object's closing brace
    const entry = lead === indent.length ? /^\s*'?([\w-]+)'?: \{/.exec(line) : null;
    if (entry) specs.push({ name: entry[1]!, spec: line });
    else if (specs.length) specs[specs.length - 1]!.spec += `\n${line}`;
  }
  return specs;
}

/** The options a script's parseCli call lists, without the hidden ones. */
function listedOptions(file: string): string[] {
  return optionSpecs(file)
    .filter((o) => !o.spec.includes('hidden: true'))
    .map((o) => o.name);
}

const run = (file: string, arg: string) =>
  spawnSync(file.endsWith('.sh') ? 'bash' : process.execPath, [file, arg], {
    cwd: root,
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, FORCE_COLOR: '0' },
  });

test('the scripts were found', () => {
  assert.ok(scripts.length >= 20, scripts.join(' '));
  assert.ok(scripts.includes('bench/pd.mjs') && scripts.includes('scripts/fuzz.sh'));
});

for (const file of scripts) {
  test(`${file} --help`, () => {
    const r = run(file, '--help');
    assert.is(r.status, 0, `exit ${r.status}\n${r.stderr}`);
    assert.ok(/^usage: |\n\s*(node|bash) /.test(r.stdout), `no usage line:\n${r.stdout}`);
    assert.not.match(r.stderr, /\n\s+at /, 'a stack trace');
    for (const name of listedOptions(file)) assert.ok(r.stdout.includes(`--${name}`), `--${name} missing:\n${r.stdout}`);
  });
  // A numeric option declares its range, and parseCli refuses a value outside it before the
  // script starts anything; before, `--duration abc` ran a bench for NaN seconds.
  const specs = optionSpecs(file);
  if (specs.length) {
    test(`${file}: every numeric option declares its range, and a value outside it is refused`, () => {
      for (const { name, spec } of specs) {
        const numericDefault = /default: '-?[\d.]+'/.test(spec);
        assert.ok(!numericDefault || spec.includes('number: {'), `--${name} has a numeric default but no number range:\n${spec}`);
        if (!spec.includes('number: {')) continue;
        const r = run(file, `--${name}=not-a-number`);
        assert.is(r.status, 2, `--${name}=not-a-number: exit ${r.status}\n${r.stderr}`);
        assert.match(r.stderr, new RegExp(`^Expected --${name} to be (an integer|a number)[^\\n]*, got "not-a-number"\\n\\nusage: `));
      }
    });
  }
  if (file.endsWith('.mjs') && readFileSync(join(root, file), 'utf8').includes('parseCli(')) {
    test(`${file} refuses an unknown option`, () => {
      const r = run(file, '--no-such-option');
      assert.is(r.status, 2, `exit ${r.status}`);
      assert.match(r.stderr, /^Unknown option '--no-such-option'\n\nusage: /);
      assert.not.match(r.stderr, /\n\s+at /, 'a stack trace');
    });
  }
}

test('the modules in subfolders are not scripts (no shebang)', () => {
  for (const dir of ['bench/lib', 'scripts/lib', 'scripts/chaos']) {
    for (const f of readdirSync(join(root, dir)).filter((n) => n.endsWith('.mjs'))) {
      assert.not.ok(readFileSync(join(root, dir, f), 'utf8').startsWith('#!'), `${dir}/${f} has a shebang: list it as a script`);
    }
  }
});

test.run();
