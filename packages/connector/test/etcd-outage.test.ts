// etcd metadata through failures, with a real etcd (Debian's etcd-server) on loopback and
// te processes as children: etcd stopped while transfers run (known peers go on, new
// lookups fail typed and fast), etcd back with its data and without it (no process
// restarts: descriptors are written again and lookups work), and a peer restarted at the
// same address, whose old-life descriptor is never used to write into its new memory.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import type { TransferEngine } from '../src/index.js';
import { PEER_TTL_S, etcdCases, codeOf, expectedSum, freePort, readFrom, until, writeTo, type Peer } from './fixtures/etcd-harness.js';

const CHUNK = 64 * 1024;

/**
 * Writes 64 KiB chunks of `src` to `peer` one after another until `more()` says stop; the
 * chunks cycle over the first `src.length` bytes of the peer's buffer. Returns how many
 * writes completed (each one must: a failure fails the test).
 */
async function writeLoop(a: TransferEngine, peer: Peer, src: Buffer, more: (done: number) => boolean): Promise<number> {
  let done = 0;
  while (more(done)) {
    const off = (done * CHUNK) % src.length;
    await writeTo(a, peer.segment, peer.addr + BigInt(off), src.subarray(off, off + CHUNK));
    done++;
  }
  return done;
}

/** Until `engine`'s view of `segment` (no transfer made) has `epoch`. */
function seesEpoch(engine: TransferEngine, segment: string, epoch: bigint, ms: number): Promise<number> {
  return until(
    `${engine.segmentName} sees epoch ${epoch} of ${segment}`,
    async () => (await engine.openSegment(segment, { connect: false }).catch(() => undefined))?.epoch === epoch,
    ms,
  );
}

// Every case below needs a real etcd; without one each is registered as skipped.
const { etcdTest, suite } = etcdCases();
const { engine, peer } = suite;

etcdTest('etcd stopped during transfers: known peers go on, new lookups fail typed and fast; back with its data: lookups work, nothing restarted', async () => {
  const prefix = `t-${randomBytes(4).toString('hex')}`;
  const b = await peer(prefix, 7);
  const c = await peer(prefix, 9);
  const a = await engine(prefix);
  const src = randomBytes(512 * 1024);
  let stopped = false;
  let afterStop = 0;
  let written = 0;
  // Transfers run while etcd goes: 20 of them start after it is gone.
  const loop = writeLoop(a, b, src, (n) => {
    written = n;
    return !stopped || ++afterStop <= 20;
  });
  await until('transfers under way', () => written >= 10, 10_000);
  await suite.etcd().stop();
  stopped = true;
  try {
    const writes = await loop;
    console.log(`  ${writes} writes of 64 KiB to a known peer completed, the last 20 started with etcd stopped`);
    assert.is(await b.sum(), expectedSum(7, 0, src), 'every write landed');
    const t0 = Date.now();
    assert.is(await codeOf(readFrom(a, c.segment, c.addr, 64)), 'PEER_UNREACHABLE', 'a new lookup without etcd');
    const ms = Date.now() - t0;
    console.log(`  a new lookup with etcd stopped failed after ${ms} ms (handshakeMs 3000)`);
    assert.ok(ms < 4500, `${ms} ms`);
  } finally {
    await suite.etcd().start();
  }
  const back = await until('a new lookup after etcd came back', async () => (await codeOf(readFrom(a, c.segment, c.addr, 64))) === 'OK', 15_000);
  console.log(`  new lookups work ${back} ms after etcd came back with its data`);
  assert.ok((await readFrom(a, c.segment, c.addr, 4096)).every((x) => x === 9));
  // A lease that expired while etcd was down takes its key with it once etcd is back; each
  // process writes its descriptor again when it sees the loss, which may come after the lookup
  // above worked: wait for that (with a deadline), not for a snapshot.
  const keysBack = await until('every process has its descriptor in etcd', async () => (await suite.etcd().keys(`${prefix}/segments/`)).length === 3, 10_000);
  console.log(`  every process's descriptor in etcd ${keysBack} ms after lookups worked again`);
  assert.equal((await suite.etcd().keys(`${prefix}/segments/`)).length, 3, 'every process still has its descriptor in etcd');
});

etcdTest('etcd back without its data: descriptors are written again, lookups work, and the watch sees a peer restarted at the same address', async () => {
  const prefix = `t-${randomBytes(4).toString('hex')}`;
  const ports = { control: await freePort(), data: await freePort() };
  let b = await peer(prefix, 3, ports);
  const c = await peer(prefix, 5);
  const a = await engine(prefix);
  await readFrom(a, b.segment, b.addr, 64);
  // Revisions of the old etcd run ahead of the new one's (as in any etcd that lived a
  // while): a watch resumed at the old revision would report nothing for a long time.
  for (let i = 0; i < 60; i++) await suite.etcd().put(`unrelated/${i}`, Buffer.from('x'));
  const src = randomBytes(256 * 1024);
  let stopped = false;
  let afterStop = 0;
  let written = 0;
  const loop = writeLoop(a, b, src, (n) => {
    written = n;
    return !stopped || ++afterStop <= 20;
  });
  await until('transfers under way', () => written >= 10, 10_000);
  await suite.etcd().stop();
  stopped = true;
  await suite.etcd().start({ wipe: true });
  const t0 = Date.now();
  await loop;
  assert.is(await b.sum(), expectedSum(3, 0, src), 'writes to a known peer landed across the empty restart');
  const back = await until('descriptors written again', async () => (await suite.etcd().keys(`${prefix}/segments/`)).length === 3, (PEER_TTL_S + 10) * 1000);
  console.log(`  all three descriptors back in etcd ${Date.now() - t0} ms after it restarted empty (${back} ms of polling)`);
  // A lookup the engine never made before, from the same engine: no restart needed.
  assert.ok((await readFrom(a, c.segment, c.addr, 4096)).every((x) => x === 5));
  // The peer restarts at the same address; a's cached descriptor of it must go.
  b.child.kill('SIGKILL');
  const old = b;
  b = await peer(prefix, 4, ports);
  assert.is(b.segment, old.segment);
  const seen = await seesEpoch(a, b.segment, b.epoch, 5000);
  console.log(`  the restarted peer's new epoch seen ${seen} ms after it registered`);
  const bytes = randomBytes(CHUNK);
  await writeTo(a, b.segment, b.addr, bytes);
  assert.is(await b.sum(), expectedSum(4, 0, bytes), 'the write landed in the new memory');
});

etcdTest('a peer restarted at the same address: writes land in its new memory; its old-life descriptor is refused (epoch)', async () => {
  const prefix = `t-${randomBytes(4).toString('hex')}`;
  const ports = { control: await freePort(), data: await freePort() };
  const old = await peer(prefix, 0x11, ports);
  const a = await engine(prefix);
  await writeTo(a, old.segment, old.addr, randomBytes(4096));
  const oldDescriptor = (await suite.etcd().range(`${prefix}/segments/${old.segment}`)).get(`${prefix}/segments/${old.segment}`)!;
  // Killed and back at once: the old key (its lease still alive) is overwritten, not
  // expired, so only the epoch in it tells the two lives apart.
  old.child.kill('SIGKILL');
  const renewed = await peer(prefix, 0x22, ports);
  assert.is(renewed.segment, old.segment, 'same control address');
  assert.is.not(renewed.epoch, old.epoch);
  await seesEpoch(a, renewed.segment, renewed.epoch, 5000);
  const bytes = randomBytes(8192);
  await writeTo(a, renewed.segment, renewed.addr + 512n, bytes);
  assert.is(await renewed.sum(), expectedSum(0x22, 512, bytes), 'the bytes landed in the new memory');
  // The old life's descriptor, as a stale entry would present it (another prefix, so
  // the live process does not write over it): same address, old epoch. Refused at the
  // transport's handshake; the new memory is untouched, also at the old address.
  const stalePrefix = `${prefix}-stale`;
  await suite.etcd().put(`${stalePrefix}/segments/${old.segment}`, oldDescriptor);
  const f = await engine(stalePrefix);
  assert.is((await f.openSegment(old.segment, { connect: false })).epoch, old.epoch, 'f holds the old-life descriptor');
  assert.is(await codeOf(writeTo(f, old.segment, old.addr, randomBytes(4096))), 'STALE_DESCRIPTOR');
  assert.is(await codeOf(writeTo(f, old.segment, renewed.addr + 512n, randomBytes(4096))), 'STALE_DESCRIPTOR');
  assert.is(await renewed.sum(), expectedSum(0x22, 512, bytes), 'nothing written through the old descriptor');
});

test.run();
