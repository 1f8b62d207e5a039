// A buffer registered with the wire transport directly (no engine in between) cannot be
// detached while a Mooncake initiator may write to it: the transport keeps it attached.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { TRANSFER_LISTS_KEEP_REGISTERED_BUFFERS, tryToDetach } from '@te/testkit';
import { batchOf, wire } from './helpers.js';

test("a directly registered buffer stays attached, and a Mooncake initiator's write lands in it", async () => {
  const target = await wire({ listen: true });
  const init = await wire({});
  try {
    const size = 1 << 20;
    const remote = new Uint8Array(size);
    const reg = await target.registerMemory({ buffer: remote, length: BigInt(size), device: 'cpu', remoteAccess: true });
    tryToDetach(remote.buffer, { transferLists: TRANSFER_LISTS_KEEP_REGISTERED_BUFFERS });
    assert.is(remote.byteLength, size, 'the registered buffer is still attached');
    const source = new Uint8Array(size).fill(0x5d);
    const s = await init.registerMemory({ buffer: source, length: BigInt(size), device: 'cpu', remoteAccess: false });
    const { peer } = await init.openSegment(target.mooncakeSegment!);
    await init.submit(peer, batchOf([{ op: 'write', local: s.addr, remote: reg.addr, length: size }]), { timeoutMs: 10_000 });
    assert.ok(
      remote.every((x) => x === 0x5d),
      'every byte landed in the registered buffer',
    );
  } finally {
    await init.close();
    await target.close();
  }
});

test.run();
