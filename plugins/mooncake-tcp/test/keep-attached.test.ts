// A buffer registered with the transport directly (the SPI, no engine in between) stays
// attached: NativeTransportBase.hostBuffer keeps it so before native code takes its pointer.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { TRANSFER_LISTS_KEEP_REGISTERED_BUFFERS, tryToDetach } from '@te/testkit';
import { MiB, withLocalTransport } from './helpers.js';

test('a buffer registered through the SPI cannot be detached', async () => {
  await withLocalTransport(MiB, {}, async (local) => {
    tryToDetach(local.buffer.buffer, { transferLists: TRANSFER_LISTS_KEEP_REGISTERED_BUFFERS });
    assert.is(local.buffer.byteLength, MiB, 'the registered buffer is still attached');
    await local.transport.unregisterMemory(local.addr);
  });
});

test.run();
