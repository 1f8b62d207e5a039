// A batch that fails in two ways at once: the target refuses one write and the connection
// ends before another is answered. The batch's code comes from the worst request status
// (CONNECTION_LOST) while its message is the first failure noted (the refusal); the message
// must say which request and which status it speaks of, or it reads as the code's cause.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { allocateBatch, isTransferError, NATIVE_STATUS } from '@te/connector';
import { MiB, withLocalTransport } from './helpers.js';
import { recordingTarget } from './recording-target.js';
import { FEATURE_REVOKE } from './wire.js';

test("a refusal beside a lost connection: the message names the refused request and its status, the statuses each request's", async () => {
  const refused = (1n << 40n) + 8192n;
  const lost = (1n << 40n) + 16384n;
  // One WRITE frame per write (no WRITEV feature): request 0 is answered OK, request 1 refused,
  // and at request 2 the target hangs up.
  const peerTarget = await recordingTarget(FEATURE_REVOKE, (a) => a === refused, { hangUpAt: (a) => a === lost });
  try {
    await withLocalTransport(MiB, { lanesPerPeer: 1 }, async (local) => {
      const peer = await local.transport.openPeer(peerTarget.descriptor);
      const b = allocateBatch(3);
      for (let i = 0; i < 3; i++) {
        b.opcodes[i] = 1;
        b.localAddrs[i] = local.addr + BigInt(i * 4096);
        b.remoteAddrs[i] = (1n << 40n) + BigInt(i * 8192);
        b.lengths[i] = 4096n;
      }
      try {
        await local.transport.submit(peer, b, { timeoutMs: 10_000 });
        assert.unreachable('the batch succeeded');
      } catch (e) {
        assert.ok(isTransferError(e, 'CONNECTION_LOST'), String(e));
        assert.equal(Array.from(e.statuses ?? []), [0, NATIVE_STATUS.ADDRESS_OUT_OF_RANGE, NATIVE_STATUS.CONNECTION_LOST], 'each request has its own status');
        assert.match(e.message, /refused request 1 \(ADDRESS_OUT_OF_RANGE\)/, `the message names the refused request: ${e.message}`);
      }
    });
  } finally {
    await peerTarget.close();
  }
});

test.run();
