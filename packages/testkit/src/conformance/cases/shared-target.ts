// Conformance case with a second initiator (options.createInitiator): a target serving two
// initiators at once answers each of them in time. A target that holds answers back to
// send them together must not hold one initiator's answer while the other keeps it busy.
import * as assert from 'uvu/assert';
import type { TransferEngine } from '@te/connector';
import { assertBytes, hostMemory, pattern } from '../expect.js';
import type { CaseRegistry } from './registry.js';

const SMALL_WRITES = 30;
const LANES = 4;

/** `other` writes `bytes` of 0x5a from each of LANES lanes to `remote` again and again until stopped. */
function streamOfWrites(other: TransferEngine, target: string, local: bigint, remote: bigint, bytes: number) {
  const state = { written: 0, failure: undefined as unknown, stopping: false };
  const lanes = Array.from({ length: LANES }, async (_, k) => {
    while (!state.stopping && state.failure === undefined) {
      try {
        await other.write(target, local + BigInt(k * bytes), remote + BigInt(k * bytes), bytes);
        state.written++;
      } catch (e) {
        state.failure = e;
      }
      // A transport that completes inside submit() would otherwise keep this loop in
      // microtasks and starve the timers and I/O of everything else.
      await new Promise((r) => setImmediate(r));
    }
  });
  return {
    state,
    /** Stops the lanes; throws what failed one of them. */
    async stop(): Promise<void> {
      state.stopping = true;
      await Promise.all(lanes);
      if (state.failure !== undefined) throw state.failure;
    },
  };
}

export function sharedTargetCase({ it, options, maxBytes }: CaseRegistry): void {
  it("two initiators: a small write beside another initiator's stream of large writes completes in time", async ({ initiator, target, targetMemory }) => {
    const large = Math.min(maxBytes, 1 << 20);
    const small = Math.min(maxBytes, 64 << 10);
    const other: TransferEngine = await options.createInitiator!();
    try {
      const source = await hostMemory(other, LANES * large, 0x5a);
      const streamRemote = await targetMemory.alloc(LANES * large);
      const local = await hostMemory(initiator, small);
      const remote = await targetMemory.alloc(small);
      const stream = streamOfWrites(other, target, source.addr, streamRemote, large);
      try {
        // The stream is running before the first small write.
        for (const until = Date.now() + 10_000; stream.state.written < LANES && stream.state.failure === undefined && Date.now() < until;)
          await new Promise((r) => setTimeout(r, 5));
        if (stream.state.failure !== undefined) throw stream.state.failure;
        assert.ok(stream.state.written >= LANES, `the other initiator's stream did not start (${stream.state.written} writes in 10 s)`);
        const before = stream.state.written;
        for (let i = 0; i < SMALL_WRITES; i++) {
          local.buffer.set(pattern(small, i + 1));
          const started = Date.now();
          // Far past what one small write takes beside the stream; short enough that an answer
          // held back until the deadline fails the case instead of passing slowly.
          const outcome = await initiator.write(target, local.addr, remote, small, { timeoutMs: 5_000 }).then(
            () => 'OK',
            (e: { code?: string }) => e.code ?? String(e),
          );
          assert.is(outcome, 'OK', `small write ${i + 1} of ${SMALL_WRITES} (${Date.now() - started} ms)`);
          if (i % 10 === 9) assertBytes(await targetMemory.read(remote, small), pattern(small, i + 1), `small write ${i + 1}`);
        }
        await stream.stop();
        assert.ok(stream.state.written - before >= LANES, `the stream ran beside the small writes (${stream.state.written - before} large writes)`);
        assertBytes(await targetMemory.read(streamRemote, LANES * large), new Uint8Array(LANES * large).fill(0x5a), "the other initiator's bytes");
      } finally {
        await stream.stop().catch(() => undefined); // already reported, or the case failed first
        await initiator.freeMemory(local);
        await targetMemory.free(remote);
        await targetMemory.free(streamRemote);
      }
    } finally {
      await other.close();
    }
  });
}
