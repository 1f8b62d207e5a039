import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { ControlClient, ControlServer } from '../src/index.js';

// A process that spawns children receives SIGCHLD whenever one exits; any handled signal
// can interrupt a system call inside zeromq. Here another process sends this one SIGUSR2
// as fast as it can while control clients are created, which is when zeromq is exposed.
test('control clients are created and answer while the process is flooded with signals', async () => {
  const server = new ControlServer();
  const endpoint = await server.bind('127.0.0.1', 0);
  server.handle('echo', (body) => body);
  let signals = 0;
  const onSignal = (): void => {
    signals++;
  };
  process.on('SIGUSR2', onSignal);
  const flood = spawn('bash', ['-c', `while kill -USR2 ${process.pid} 2>/dev/null; do :; done`], { stdio: 'ignore' });
  const failures: string[] = [];
  let created = 0;
  try {
    while (signals < 50) await new Promise((r) => setTimeout(r, 5)); // the flood has started
    const until = Date.now() + 1500;
    while (Date.now() < until) {
      const batch: ControlClient[] = [];
      for (let i = 0; i < 50; i++) {
        try {
          batch.push(new ControlClient(endpoint));
          created++;
        } catch (err) {
          failures.push((err as Error).message);
        }
      }
      const answers = await Promise.all(batch.slice(0, 5).map((c, i) => c.request('echo', { i }, 5_000)));
      assert.equal(
        answers,
        [0, 1, 2, 3, 4].map((i) => ({ i })),
      );
      for (const c of batch) c.close();
    }
  } finally {
    flood.kill();
    process.off('SIGUSR2', onSignal);
    await server.close();
  }
  assert.equal(failures.slice(0, 3), [], `${failures.length} of ${created + failures.length} clients failed to connect (${signals} signals)`);
  assert.ok(created > 200, `${created} clients created`);
});

test.run();
