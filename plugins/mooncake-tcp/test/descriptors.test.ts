// Out of file descriptors: the listener must not spin on a connection it cannot accept,
// and once descriptors are free again a well-behaved peer is served.
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf } from '@te/connector';
import { hash, localTransport, MiB, pattern, rejectsWith, spawnTarget } from './helpers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** CPU seconds (user + system, all threads) the process used so far. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime (fields 14, 15) in clock ticks
}

test('EMFILE: the listener does not spin, waiting connections are closed, a peer is served once descriptors are free', async () => {
  const target = await spawnTarget(MiB, {}, undefined, { nofile: 256 });
  const local = await localTransport(MiB);
  const waiting: Socket[] = [];
  try {
    const pid = target.child.pid!;
    const port = (target.info.endpoint as { port: number }).port;
    assert.ok((await target.call<number>('exhaustDescriptors')) > 0);
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
});

test.run();
