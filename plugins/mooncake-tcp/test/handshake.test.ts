// The handshake binds what later frames rely on: the expected epoch is always checked
// (0 is no wildcard), and with a shared secret the proof covers the initiator's name, the
// name the target gives its notifications as their sender.
import { createHmac, randomBytes } from 'node:crypto';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf, NATIVE_STATUS } from '@te/connector';
import { localTransport, MiB, spawnTarget } from './helpers.js';
import { header, HEADER, OP, rawConnect, HELLO_ACK_BODY } from './wire.js';

const SECRET = 'correct horse';

function helloFrame(expectedEpoch: bigint, name: string, nonce: Buffer): Buffer {
  const body = Buffer.alloc(8 + 16 + 2 + name.length);
  body.writeBigUInt64LE(1n, 0);
  nonce.copy(body, 8);
  body.writeUInt16LE(name.length, 24);
  body.write(name, 26);
  return Buffer.concat([header(OP.HELLO, { addr: expectedEpoch, length: BigInt(body.length) }), body]);
}

test('a HELLO expecting epoch 0 is refused with STALE_DESCRIPTOR, like any other wrong epoch', async () => {
  const target = await spawnTarget(MiB);
  try {
    const port = (target.info.endpoint as { port: number }).port;
    for (const epoch of [0n, BigInt(target.info.epoch) ^ 1n]) {
      const raw = await rawConnect(port);
      raw.socket.write(helloFrame(epoch, 'raw', randomBytes(16)));
      const ack = (await raw.read(HEADER))!;
      assert.ok(ack, `an answer to a HELLO expecting epoch ${epoch}`);
      assert.is(ack.readInt32LE(8), NATIVE_STATUS.STALE_DESCRIPTOR, `HELLO expecting epoch ${epoch}`);
      assert.ok(await raw.closed(2000), 'and the connection is closed');
    }
  } finally {
    await target.call('exit').catch(() => {});
  }
});

test('with a secret, the proof covers the HELLO name: a proof without it is refused; notifications carry the proven name', async () => {
  const target = await spawnTarget(MiB, { authSecret: SECRET });
  const sender = await localTransport(MiB, { authSecret: SECRET }, 'prefill-7');
  try {
    const port = (target.info.endpoint as { port: number }).port;
    const epoch = BigInt(target.info.epoch);
    const epochLE = Buffer.alloc(8);
    epochLE.writeBigUInt64LE(epoch);
    const attempt = async (name: string, macOver: Buffer[]) => {
      const raw = await rawConnect(port);
      const nonce = randomBytes(16);
      raw.socket.write(helloFrame(epoch, name, nonce));
      const ack = (await raw.read(HEADER + HELLO_ACK_BODY))!;
      const serverNonce = ack.subarray(HEADER, HEADER + 16);
      const mac = createHmac('sha256', SECRET)
        .update(Buffer.concat([Buffer.from('te-tcp/1 client'), nonce, serverNonce, epochLE, ...macOver]))
        .digest();
      raw.socket.write(Buffer.concat([header(OP.AUTH, { length: 32n }), mac]));
      const answer = await raw.read(HEADER);
      raw.socket.destroy();
      return answer ? answer.readInt32LE(8) : null;
    };
    // Knowing the secret, but proving nothing about the name: refused.
    assert.is(await attempt('mallory', []), NATIVE_STATUS.AUTH_FAILED);
    // A proof over another name than the HELLO's: refused.
    assert.is(await attempt('mallory', [Buffer.from('prefill-7')]), NATIVE_STATUS.AUTH_FAILED);
    assert.is(await attempt('mallory', [Buffer.from('mallory')]), 0, 'a proof over the HELLO name is accepted');
    const peer = await sender.transport.openPeer(target.descriptor);
    await sender.transport.submit(peer, batchOf([]), { timeoutMs: 5000, notify: new TextEncoder().encode('kv ready') });
    const notes = await target.call<{ from: string; payload: string }[]>('notifications');
    assert.equal(
      notes.map((n) => [n.from, n.payload]),
      [['prefill-7', 'kv ready']],
    );
  } finally {
    await sender.transport.close();
    await target.call('exit').catch(() => {});
  }
});

test.run();
