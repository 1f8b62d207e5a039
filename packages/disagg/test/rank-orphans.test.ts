import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/*
 * A test process that dies (killed by a timeout, interrupted) must not leave its rank
 * processes behind: an orphaned rank keeps its ports, memory and engine threads until the
 * machine restarts. The rank exits when its IPC channel to the test closes.
 */
const harness = fileURLToPath(new URL('./pd-harness.ts', import.meta.url));

/** Whether `pid` still runs (a zombie waiting for its new parent to reap it has exited). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** What a process that did not exit is doing: its state and each thread's name, state and kernel wait. */
function whereIs(pid: number): string {
  const read = (f: string) => {
    try {
      return readFileSync(f, 'utf8').trim();
    } catch {
      return '?';
    }
  };
  let tids: string[] = [];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return 'gone';
  }
  return tids
    .map((t) => {
      const stat = read(`/proc/${pid}/task/${t}/stat`);
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      return `${t} ${read(`/proc/${pid}/task/${t}/comm`)} ${state} ${read(`/proc/${pid}/task/${t}/wchan`)}`;
    })
    .join('; ');
}

test('a rank process exits when the test process that started it is killed', async () => {
  const script = `const h = await import(${JSON.stringify(harness)}); const r = await h.spawnEC({ role: 'producer' }); process.stdout.write('rank-pid ' + r.child.pid + ' '); setInterval(() => {}, 1000);`;
  const parent = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  const pid = await new Promise<number>((resolve, reject) => {
    let out = '';
    parent.stdout!.on('data', (d) => {
      out += d;
      const m = out.match(/rank-pid (\d+) /);
      if (m) resolve(Number(m[1]));
    });
    parent.once('exit', (code) => reject(new Error(`the test process exited (${code}) before its rank was up:\n${out}`)));
    setTimeout(() => reject(new Error(`no rank pid within 60 s:\n${out}`)), 60_000).unref();
  }).catch((e) => {
    parent.kill('SIGKILL');
    throw e;
  });
  assert.ok(running(pid), 'the rank runs');
  parent.kill('SIGKILL');
  const deadline = Date.now() + 15_000;
  while (running(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  const alive = running(pid);
  const where = alive ? whereIs(pid) : '';
  if (alive) process.kill(pid, 'SIGKILL');
  assert.not.ok(alive, `rank ${pid} outlived the process that started it (threads: ${where})`);
});
test('a test that leaves a rank behind does not hold its test process open, and the rank exits with it', async () => {
  // As a test does whose sibling rank failed to start: the rank that did start is never closed.
  const script = `const h = await import(${JSON.stringify(harness)}); const r = await h.spawnEC({ role: 'producer' }); process.stdout.write('rank-pid ' + r.child.pid + ' ');`;
  const parent = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  parent.stdout!.on('data', (d) => (out += d));
  const exited = await new Promise<boolean>((resolve) => {
    parent.once('exit', () => resolve(true));
    setTimeout(() => resolve(false), 60_000).unref();
  });
  if (!exited) parent.kill('SIGKILL');
  assert.ok(exited, `the test process was held open by its rank:\n${out}`);
  const pid = Number(out.match(/rank-pid (\d+) /)?.[1]);
  assert.ok(pid > 0, `no rank pid:\n${out}`);
  const deadline = Date.now() + 15_000;
  while (running(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  const alive = running(pid);
  const where = alive ? whereIs(pid) : '';
  if (alive) process.kill(pid, 'SIGKILL');
  assert.not.ok(alive, `rank ${pid} outlived the test process that left it behind (threads: ${where})`);
});

test.run();
