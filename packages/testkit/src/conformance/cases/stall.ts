// Conformance cases against a stalled peer (pair.stall/resume): an abort in flight and a
// deadline both end the batch in time, and the engine works afterwards.
import * as assert from 'uvu/assert';
import { assertBytes, hostMemory, pattern, rejectsWith } from '../expect.js';
import type { CaseRegistry } from './registry.js';

export function stallCases({ needsStall, stallBytes }: CaseRegistry): void {
  needsStall('abort: in flight, against a stalled peer', async (pair) => {
    const { initiator, target, targetMemory } = pair;
    const local = await hostMemory(initiator, stallBytes);
    const remote = await targetMemory.alloc(stallBytes);
    try {
      await pair.stall!();
      const ac = new AbortController();
      const started = Date.now();
      const p = initiator.write(target, local.addr, remote, stallBytes, { signal: ac.signal, timeoutMs: 20_000 });
      setTimeout(() => ac.abort(), 50);
      await rejectsWith(p, ['ABORTED']);
      assert.ok(Date.now() - started < 5_000, `abort took ${Date.now() - started} ms`);
    } finally {
      await pair.resume!();
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
    // The engine still works afterwards.
    const again = await hostMemory(initiator, 64, pattern(64, 5));
    const r2 = await targetMemory.alloc(64);
    await initiator.write(target, again.addr, r2, 64);
    assertBytes(await targetMemory.read(r2, 64), pattern(64, 5));
    await initiator.freeMemory(again);
    await targetMemory.free(r2);
  });

  needsStall('deadline: a stalled peer fails the batch with TIMEOUT in time', async (pair) => {
    const { initiator, target, targetMemory } = pair;
    const local = await hostMemory(initiator, stallBytes);
    const remote = await targetMemory.alloc(stallBytes);
    try {
      await pair.stall!();
      const started = Date.now();
      const err = (await rejectsWith(initiator.write(target, local.addr, remote, stallBytes, { timeoutMs: 300 }), ['TIMEOUT'])) as Error & {
        details?: { settled?: boolean };
      };
      const took = Date.now() - started;
      // The engine releases a caller 2 s past the deadline even when the transport has not
      // answered (settled: false): passing on that would hide a transport that ignores timeoutMs.
      assert.is.not(err.details?.settled, false, `the transport did not end the batch at its deadline: the engine's watchdog did (${err.message})`);
      assert.ok(took >= 250 && took < 2_000, `deadline of 300 ms took ${took} ms`);
    } finally {
      await pair.resume!();
      await initiator.freeMemory(local);
      await targetMemory.free(remote);
    }
  });
}
