#!/usr/bin/env node
// Formats or checks the C++ sources (native/, plugins/*/native/, packages/*/native/, their test/native/, fuzz/) with clang-format and
// the repository's .clang-format. Files are the tracked ones (git ls-files), so build trees and
// the copies CMake makes of the shared core are never touched.
import { execFileSync, spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCli } from './lib/cli.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { values, positionals } = parseCli({
  usage: 'node scripts/format-native.mjs (--check | --write) [file ...]',
  summary:
    'Checks (--check) or rewrites (--write) the C++ sources with clang-format and .clang-format.\nWithout files: every tracked C++ source under native/, plugins/*/native/, packages/*/native/, their test/native/ and fuzz/.',
  allowPositionals: true,
  options: {
    check: { type: 'boolean', default: false, help: 'report files that differ from the style; exit 1 if any' },
    write: { type: 'boolean', default: false, help: 'rewrite files in place' },
  },
  notes: 'clang-format comes from $CLANG_FORMAT, else clang-format or clang-format-14 on PATH (Debian: apt-get install -y clang-format).',
});
if (values.check === values.write) {
  process.stderr.write('format-native: give exactly one of --check and --write (see --help)\n');
  process.exit(2);
}

function clangFormat() {
  for (const name of [process.env.CLANG_FORMAT, 'clang-format', 'clang-format-14'].filter(Boolean)) {
    if (spawnSync(name, ['--version'], { stdio: 'ignore' }).status === 0) return name;
  }
  process.stderr.write('format-native: clang-format is not installed (apt-get install -y clang-format, or set CLANG_FORMAT)\n');
  process.exit(3);
}

const CXX = /\.(c|cc|cpp|h|hpp|cu|cuh)$/;
const files = positionals.length
  ? positionals
  : execFileSync(
      'git',
      ['ls-files', '--', 'native', 'fuzz', ...['plugins', 'packages'].flatMap((d) => [`:(glob)${d}/*/native/**`, `:(glob)${d}/*/test/native/**`])],
      { cwd: root, encoding: 'utf8' },
    )
      .split('\n')
      .filter((f) => CXX.test(f) && !f.includes('/third_party/')); // vendored libraries keep their authors' format
const bin = clangFormat();
const args = values.write ? ['-i', ...files] : ['--dry-run', '--Werror', ...files];
const r = spawnSync(bin, ['--style=file', ...args], { cwd: root, stdio: 'inherit' });
if (values.check && r.status !== 0) process.stderr.write(`format-native: C++ sources differ from .clang-format (npm run format rewrites them)\n`);
process.exit(r.status ?? 1);
