#!/usr/bin/env node
// Builds every package (lerna, in dependency order) showing one line per package instead of
// the tools' logs; on failure, prints the captured log of the build that failed and exits 1.
import { spawn } from 'node:child_process';
import { parseCli } from './lib/cli.mjs';

parseCli({
  usage: 'node scripts/quiet-build.mjs',
  summary: "Builds every package (lerna, in dependency order), one line per package; on failure prints the failed build's log and exits 1.",
});

const started = Date.now();
const child = spawn('npx', ['lerna', 'run', 'build', '--concurrency', '2'], {
  stdio: ['ignore', 'pipe', 'pipe'],
  env: { ...process.env, FORCE_COLOR: '0', NX_TUI: 'false' },
});
let log = '';
const seen = new Set();
const tty = process.stdout.isTTY;
const onData = (chunk) => {
  // eslint-disable-next-line no-control-regex
  const text = chunk.toString().replace(/\x1b\[[0-9;]*m/g, '');
  log += text;
  for (const m of text.matchAll(/^> (@te\/[\w-]+):build/gm)) {
    if (seen.has(m[1])) continue;
    seen.add(m[1]);
    const line = `  building ${m[1]} (${seen.size})`;
    if (tty) process.stdout.write(`\r\x1b[K${line}`);
    else console.log(line);
  }
};
child.stdout.on('data', onData);
child.stderr.on('data', onData);
child.on('exit', (code) => {
  if (tty) process.stdout.write('\r\x1b[K');
  if (code === 0) {
    console.log(`  built ${seen.size} packages in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    return;
  }
  console.error(log);
  console.error(`build failed (exit ${code}); the log above is the build's own output`);
  process.exit(1);
});
