// A buffer registered with the transport directly (the SPI, no engine in between) stays
// attached: NativeTransportBase.hostBuffer keeps it so before native code takes its pointer.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { TRANSFER_LISTS_KEEP_REGISTERED_BUFFERS, tryToDetach } from '@te/testkit';
import { localTransport, MiB } from './helpers.js';

test('a buffer registered through the SPI cannot be detached', async () => {
  const local = await localTransport(MiB);
  try {
    tryToDetach(local.buffer.buffer, { transferLists: TRANSFER_LISTS_KEEP_REGISTERED_BUFFERS });
    assert.is(local.buffer.byteLength, MiB, 'the registered buffer is still attached');
    await local.transport.unregisterMemory(local.addr);
  } finally {
    await local.transport.close();
  }
});

test.run();
