// Out of file descriptors: the listener must not spin on a connection it cannot accept,
// and once descriptors are free again a well-behaved peer is served.
import { connect, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf } from '@te/connector';
import { cpuSeconds } from '@te/testkit';
import { hash, localTransport, MiB, pattern, rejectsWith, spawnTarget, type TargetProcess } from './helpers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The target is out of descriptors: the checks of both cases below. */
async function shedsWhileOutOfDescriptors(target: TargetProcess): Promise<void> {
  const local = await localTransport(MiB);
  const waiting: Socket[] = [];
  try {
    const pid = target.child.pid!;
    const port = (target.info.endpoint as { port: number }).port;
    // Connections the target cannot accept: the kernel completes them into the backlog.
    const closedByTarget: Promise<boolean>[] = [];
    for (let i = 0; i < 5; i++) {
      const s = connect({ host: '127.0.0.1', port });
      s.on('error', () => {});
      waiting.push(s);
      closedByTarget.push(
        new Promise((r) => {
          s.once('close', () => r(true));
          setTimeout(() => r(false), 5000);
        }),
      );
    }
    await sleep(300);
    const cpu0 = cpuSeconds(pid);
    const t0 = Date.now();
    await sleep(1000);
    const used = cpuSeconds(pid) - cpu0;
    const wall = (Date.now() - t0) / 1000;
    if (process.env.TE_TEST_VERBOSE) console.log(`target CPU ${used.toFixed(2)} s in ${wall.toFixed(2)} s while out of descriptors`);
    assert.ok(used < 0.3 * wall, `target used ${used.toFixed(2)} s of CPU in ${wall.toFixed(2)} s while out of descriptors`);
    assert.ok((await Promise.all(closedByTarget)).every(Boolean), 'connections that could not be served were closed, not left hanging');
    // A real initiator meanwhile: the target closes its connection at once, so openPeer fails
    // with CONNECTION_LOST during the handshake (docs/plugins/mooncake-tcp.md, failure table)
    // rather than waiting out its connect timeout.
    await rejectsWith(local.transport.openPeer(target.descriptor), 'CONNECTION_LOST');
    // Secondary (documented: "logs a warning once per episode"): one warning for the episode,
    // however many connections were shed.
    const warnings = await target.call<string[]>('warnings');
    assert.is(warnings.filter((w) => /out of file descriptors/.test(w)).length, 1, 'the episode is logged once');
    await target.call('releaseDescriptors');
    const peer = await local.transport.openPeer(target.descriptor);
    const data = pattern(9, 64 * 1024);
    local.buffer.set(data, 0);
    const r = await local.transport.submit(peer, batchOf([{ op: 'write', local: local.addr, remote: BigInt(target.info.addr), length: data.length }]), {
      timeoutMs: 5000,
    });
    assert.equal(Array.from(r.statuses), [0]);
    assert.is(await target.call('hash', { offset: 0, length: data.length }), hash(data));
  } finally {
    for (const s of waiting) s.destroy();
    await local.transport.close();
    await target.call('releaseDescriptors').catch(() => {});
    await target.call('exit').catch(() => {});
  }
}

test('EMFILE: the listener does not spin, waiting connections are closed, a peer is served once descriptors are free', async () => {
  const target = await spawnTarget(MiB, {}, undefined, { nofile: 256 });
  assert.ok((await target.call<number>('exhaustDescriptors')) > 0);
  await shedsWhileOutOfDescriptors(target);
});

// The listener's reserve descriptor is taken before create() resolves: a process that uses
// up its descriptors right after the start (or starts with none to spare) still sheds.
test('EMFILE: a transport started with no descriptor to spare still closes the connections it cannot accept', async () => {
  const target = await spawnTarget(MiB, {}, undefined, { nofile: 256, tight: true });
  const failures = await target.call<{ code?: string; message: string }[]>('tightFailures');
  // Each failed create says why (loading the addon may be one of them); the transport's own
  // start refuses with a TransferError.
  for (const f of failures) assert.match(f.message, /out of file descriptors|Too many open files/, `a start short of descriptors says so: ${f.message}`);
  const starts = failures.filter((f) => /cannot start: out of file descriptors/.test(f.message));
  assert.ok(starts.length > 0, `the transport's start ran short of descriptors at least once: ${JSON.stringify(failures)}`);
  assert.ok(
    starts.every((f) => f.code === 'INTERNAL'),
    'each failed start is a TransferError (INTERNAL)',
  );
  assert.is(await target.call<number>('exhaustDescriptors'), 0, 'the started transport left no descriptor free');
  await shedsWhileOutOfDescriptors(target);
});

test.run();
