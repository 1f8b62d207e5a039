// The initiator's HELLO name is the sender of every notification its connection delivers,
// and each queued notification carries a copy of it. So a target bounds the name (at most
// 1 KiB: any host:port segment name fits) and charges it, with the payload, to the
// notification byte budget: many connections with long names cannot queue more than
// notifyQueueBytes (with no auth secret, the default, anyone reaching the port can try).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { NATIVE_STATUS } from '@te/connector';
import { localTransport, MiB, rejectsWith, spawnTarget } from './helpers.js';
import { header, HEADER, hello, OP, rawConnect, HELLO_ACK_BODY } from './wire.js';

const MAX_NAME = 1024; // native/wire.h kMaxPeerName
const OVERHEAD = 256; // native/transport.cpp kNotifyOverhead

test('a HELLO whose name is longer than 1 KiB is refused with INVALID_ARGUMENT and closed; 1 KiB is accepted', async () => {
  const target = await spawnTarget(MiB);
  try {
    const port = (target.info.endpoint as { port: number }).port;
    const epoch = BigInt(target.info.epoch);
    for (const length of [MAX_NAME + 1, 60_000]) {
      const raw = await rawConnect(port);
      raw.socket.write(hello(epoch, 'n'.repeat(length)));
      const ack = (await raw.read(HEADER))!;
      assert.ok(ack, `an answer to a HELLO with a ${length}-byte name`);
      assert.is(ack[6], OP.HELLO | OP.RESPONSE);
      assert.is(ack.readInt32LE(8), NATIVE_STATUS.INVALID_ARGUMENT, `HELLO with a ${length}-byte name`);
      assert.ok(await raw.closed(2000), 'and the connection is closed');
    }
    const ok = await rawConnect(port);
    ok.socket.write(hello(epoch, 'n'.repeat(MAX_NAME)));
    const ack = (await ok.read(HEADER + HELLO_ACK_BODY))!;
    assert.is(ack.readInt32LE(8), 0, 'a 1 KiB name is accepted');
    ok.socket.destroy();
  } finally {
    await target.call('exit').catch(() => {});
  }
});

test('an initiator whose own name is too long fails openPeer with INVALID_ARGUMENT before sending it', async () => {
  const target = await spawnTarget(MiB);
  const local = await localTransport(MiB, {}, `${'h'.repeat(MAX_NAME)}:1234`);
  try {
    const e = await rejectsWith(local.transport.openPeer(target.descriptor), 'INVALID_ARGUMENT');
    assert.match(e.message, /at most 1024 bytes/);
  } finally {
    await local.transport.close();
    await target.call('exit').catch(() => {});
  }
});

test('queued notifications are charged their sender name: a long name queues proportionally fewer', async () => {
  const BUDGET = 65536; // the smallest notifyQueueBytes
  const target = await spawnTarget(MiB, { notifyQueueBytes: BUDGET, notifyQueuePerPeer: 1024 });
  try {
    const port = (target.info.endpoint as { port: number }).port;
    const epoch = BigInt(target.info.epoch);
    const name = 'x'.repeat(1000);
    const raw = await rawConnect(port);
    raw.socket.write(hello(epoch, name));
    assert.is((await raw.read(HEADER + HELLO_ACK_BODY))!.readInt32LE(8), 0);
    // The receiver's JS thread is busy: nothing leaves its queue meanwhile.
    const { started, release, done: blocked } = target.block();
    await started;
    const N = 300;
    const frames: Buffer[] = [];
    for (let i = 1; i <= N; i++) frames.push(header(OP.NOTIFY, { id: BigInt(i), length: 1n }), Buffer.from([i & 255]));
    raw.socket.write(Buffer.concat(frames));
    const statuses: number[] = [];
    for (let i = 0; i < N; i++) {
      const r = (await raw.read(HEADER))!;
      assert.ok(r, `an answer to NOTIFY ${i + 1}`);
      assert.is(r[6], OP.NOTIFY | OP.RESPONSE);
      statuses.push(r.readInt32LE(8));
    }
    const ok = statuses.filter((s) => s === 0).length;
    const expected = Math.floor(BUDGET / (1 + name.length + OVERHEAD));
    assert.is(ok, expected, `${ok} notifications queued under a ${BUDGET}-byte budget (each costs ${1 + name.length + OVERHEAD} B)`);
    assert.ok(
      statuses.slice(ok).every((s) => s === NATIVE_STATUS.POOL_EXHAUSTED),
      'the rest are refused with POOL_EXHAUSTED',
    );
    release();
    await blocked;
    // What was acknowledged reaches the listeners, under the HELLO's name; then the budget is free again.
    const deadline = Date.now() + 5000;
    while ((await target.call<number>('notificationCount')) < ok && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const notes = await target.call<{ from: string }[]>('notifications');
    assert.is(notes.length, ok);
    assert.ok(notes.every((n) => n.from === name));
    raw.socket.write(Buffer.concat([header(OP.NOTIFY, { id: 1000n, length: 1n }), Buffer.from([1])]));
    assert.is((await raw.read(HEADER))!.readInt32LE(8), 0, 'room again once the listeners took them');
    raw.socket.destroy();
  } finally {
    await target.call('exit').catch(() => {});
  }
});

test.run();
