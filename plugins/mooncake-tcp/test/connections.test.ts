// Accepted connections cannot exhaust the target: little memory per connection (none
// touched before it sends data), caps in total and per address, and idle or
// never-authenticated connections closed after their timeouts.
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf } from '@te/connector';
import { tcpSocketsOf, until } from '@te/testkit';
import { hash, localTransport, MiB, pattern, spawnTarget, withLocalTransport, type TargetProcess } from './helpers.js';
import { HEADER, hello, HELLO_ACK_BODY } from './wire.js';

const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
/** `p`, or a rejection naming `what` after `ms` (a fix that regressed fails, never hangs). */
const within = <T>(p: Promise<T>, ms: number, what: string) =>
  Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms))]);
const portOf = (t: TargetProcess) => (t.info.endpoint as { port: number }).port;

interface Conn {
  socket: Socket;
  /** Resolves true when the target answered the HELLO, false when it closed first. */
  answered: Promise<boolean>;
  closed: Promise<void>;
}

/** Connects from `localAddress` and sends a HELLO (unless `silent`). */
function open(port: number, epoch: bigint, localAddress = '127.0.0.1', silent = false): Promise<Conn> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, localAddress });
    socket.once('error', reject);
    socket.once('connect', () => {
      socket.removeListener('error', reject);
      socket.on('error', () => {});
      let got = 0;
      const answered = new Promise<boolean>((done) => {
        socket.on('data', (d) => {
          got += d.length;
          if (got >= HEADER + HELLO_ACK_BODY) done(true);
        });
        socket.once('close', () => done(false));
      });
      const closed = new Promise<void>((done) => socket.once('close', () => done()));
      if (!silent) socket.write(hello(epoch));
      resolve({ socket, answered, closed });
    });
  });
}

async function openMany(n: number, port: number, epoch: bigint, localAddress?: string): Promise<Conn[]> {
  const out: Conn[] = [];
  for (let i = 0; i < n; i += 250) {
    const group = await Promise.all(Array.from({ length: Math.min(250, n - i) }, () => open(port, epoch, localAddress)));
    out.push(...group);
  }
  return out;
}

test('8000 handshaked connections cost the target little memory', async () => {
  const target = await spawnTarget(MiB, { maxConnections: 10000, maxConnectionsPerAddress: 10000 });
  const conns: Conn[] = [];
  try {
    const pid = target.child.pid!;
    const before = rssMiB(pid);
    // From four source addresses (2000 each), so the ephemeral ports of one cannot run out.
    for (let k = 1; k <= 4; k++) conns.push(...(await openMany(2000, portOf(target), BigInt(target.info.epoch), `127.0.1.${k}`)));
    const answered = await Promise.all(conns.map((c) => c.answered));
    assert.is(answered.filter(Boolean).length, 8000, 'every connection completed its HELLO');
    const grew = rssMiB(pid) - before;
    if (process.env.TE_TEST_VERBOSE) console.log(`target RSS ${before.toFixed(0)} -> ${(before + grew).toFixed(0)} MiB for 8000 connections`);
    // Was 256 KiB zero-filled per connection (+2 GiB); now a 4 KiB handshake buffer each.
    assert.ok(grew < 200, `target RSS grew ${grew.toFixed(0)} MiB for 8000 connections`);
  } finally {
    // Reset, not closed: no TIME_WAIT left behind to use up ports for the next run.
    for (const c of conns) c.socket.resetAndDestroy();
    await target.call('exit').catch(() => {});
  }
});

test('connections past the per-address and total caps are closed at once; the others are served', async () => {
  const target = await spawnTarget(MiB, { maxConnections: 50, maxConnectionsPerAddress: 20 });
  const conns: Conn[] = [];
  try {
    const epoch = BigInt(target.info.epoch);
    const port = portOf(target);
    // Any 127.x.y.z is the loopback: three source addresses.
    for (const from of ['127.0.0.1', '127.0.0.2', '127.0.0.3']) conns.push(...(await openMany(25, port, epoch, from)));
    const answered = await Promise.all(conns.map((c) => c.answered));
    const per = [0, 1, 2].map((k) => answered.slice(k * 25, k * 25 + 25).filter(Boolean).length);
    assert.ok(
      per.every((n) => n <= 20),
      `served per address: ${per.join(', ')} (cap 20)`,
    );
    assert.is(
      per.reduce((a, b) => a + b, 0),
      50,
      `served in total: ${per.join(' + ')} (cap 50)`,
    );
    // Closing some makes room again: a real initiator is served.
    for (const c of conns) c.socket.destroy();
    await Promise.all(conns.map((c) => c.closed));
    // Room again once the target has dropped them (it counts what it still holds).
    const held = () => tcpSocketsOf(target.child.pid!).filter((s) => s.localPort === port);
    await until(
      () => `the target dropped the closed connections (${held().length} left)`,
      () => held().length === 0,
    );
    await withLocalTransport(MiB, {}, async (local) => {
      const peer = await local.transport.openPeer(target.descriptor);
      const data = pattern(3, 4096);
      local.buffer.set(data, 0);
      await local.transport.submit(peer, batchOf([{ op: 'write', local: local.addr, remote: BigInt(target.info.addr), length: data.length }]), {
        timeoutMs: 5000,
      });
      assert.is(await target.call('hash', { offset: 0, length: data.length }), hash(data));
    });
  } finally {
    for (const c of conns) c.socket.destroy();
    await target.call('exit').catch(() => {});
  }
});

test('silent connections close after handshakeTimeoutMs, idle ones after idleTimeoutMs; initiators reconnect', async () => {
  const target = await spawnTarget(MiB, { handshakeTimeoutMs: 300, idleTimeoutMs: 1000 });
  const local = await localTransport(MiB, { idleTimeoutMs: 1000 });
  try {
    const epoch = BigInt(target.info.epoch);
    const t0 = Date.now();
    const silent = await open(portOf(target), epoch, '127.0.0.1', true);
    const idle = await open(portOf(target), epoch);
    assert.ok(await idle.answered);
    await within(silent.closed, 5000, 'a connection without HELLO closed');
    const silentAfter = Date.now() - t0;
    await within(idle.closed, 8000, 'an idle handshaked connection closed');
    const idleAfter = Date.now() - t0;
    assert.ok(silentAfter >= 250 && silentAfter < 3000, `a connection without HELLO closed after ${silentAfter} ms`);
    assert.ok(idleAfter >= 900 && idleAfter < 5000, `an idle handshaked connection closed after ${idleAfter} ms`);
    // A real initiator's idle lanes come and go without failing a transfer.
    const peer = await local.transport.openPeer(target.descriptor);
    const data = pattern(4, 8192);
    local.buffer.set(data, 0);
    const write = () =>
      local.transport.submit(peer, batchOf([{ op: 'write', local: local.addr, remote: BigInt(target.info.addr), length: data.length }]), { timeoutMs: 5000 });
    await write();
    // The lane goes idle past idleTimeoutMs and is closed (by either side); the next write
    // opens a new one. Waited for as it happens, so that the second write surely reconnects.
    const lanes = () => tcpSocketsOf(target.child.pid!).filter((s) => s.localPort === portOf(target));
    await until(
      () => `the idle lane closed (${JSON.stringify(lanes())})`,
      () => lanes().length === 0,
    );
    await write();
    assert.is(await target.call('hash', { offset: 0, length: data.length }), hash(data));
  } finally {
    await local.transport.close();
    await target.call('exit').catch(() => {});
  }
});

test.run();
