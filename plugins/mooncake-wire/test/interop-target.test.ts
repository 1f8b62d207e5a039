// te as the target of the real Mooncake initiator (transfer_engine_bench, its own process),
// found through Mooncake's P2P handshake: its blocks land exactly in the addressed ranges,
// with pooled connections and one per request, in the v2 and the legacy framing; its reads
// are served; a request outside te's registered memory fails it.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { until } from '@te/testkit';
import { guarded, wire } from './helpers.js';
import { runInitiator, unavailable } from './mooncake-bin.js';

const why = unavailable();
const BLOCK = 65536;
const BATCH = 16;

const modes: { name: string; env: Record<string, string>; v2: boolean; pooled: boolean }[] = [
  { name: 'v2 framing, pooled connections', env: { MC_TCP_ENABLE_CONNECTION_POOL: '1' }, v2: true, pooled: true },
  { name: 'v2 framing, one connection per request', env: {}, v2: true, pooled: false },
  { name: 'legacy framing, pooled connections', env: { MC_TCP_ENABLE_CONNECTION_POOL: '1', MC_TCP_PROTO: '1' }, v2: false, pooled: true },
  { name: 'legacy framing, one connection per request', env: { MC_TCP_PROTO: '1' }, v2: false, pooled: false },
];

if (why) {
  console.log(`  skipped Mooncake interop (te as target): ${why}`);
  for (const m of modes) test.skip(`Mooncake initiator writes and reads te (${m.name}) — skipped: ${why}`, () => undefined);
  test.skip(`Mooncake initiator out of te's range — skipped: ${why}`, () => undefined);
} else {
  for (const m of modes) {
    test(`Mooncake initiator writes and reads te (${m.name})`, async () => {
      const t = await wire({ listen: true });
      try {
        // Two threads, so the initiator interleaves: block k of thread j at (k*2+j)*BLOCK.
        // This build of the initiator sends its buffer as allocated (numa_alloc: zeros; its 0xCC
        // fill exists only in CUDA builds), so te's memory starts as 0xA5 everywhere and the
        // addressed range must turn to zeros while the guards around it keep 0xA5.
        const { all, region } = await guarded(t, BLOCK * BATCH * 2, 65536, 0xa5);
        const w = await runInitiator({ segment: t.mooncakeSegment!, op: 'write', blockSize: BLOCK, batchSize: BATCH, threads: 2, seconds: 1, env: m.env });
        assert.is(w.code, 0, `the initiator failed (te's counters: ${JSON.stringify(t.stats())}):\n${w.log.slice(-2000)}`);
        assert.ok(w.batches > 0);
        // A legacy-framing initiator counts a WRITE done once its bytes are in its socket: te
        // may still be applying the last ones when the process has exited, and a connection
        // that found te's accept queue full arrives with a SYN-ACK retransmission (up to 7 s).
        await until(
          () => `te applied ${t.stats().writes} of the ${w.batches * BATCH} WRITEs`,
          () => t.stats().writes === w.batches * BATCH,
          15_000,
        );
        assert.ok(
          region.every((b) => b === 0),
          "every addressed byte holds the initiator's bytes",
        );
        const guards = [...all.subarray(0, 65536), ...all.subarray(65536 + region.length)];
        assert.ok(
          guards.every((b) => b === 0xa5),
          'no byte outside the registered region changed',
        );
        const s = t.stats();
        assert.is(s.writes, w.batches * BATCH, 'every request of every finished batch was applied once');
        assert.is(s.bytesWritten, w.batches * BATCH * BLOCK);
        assert.ok(m.v2 ? s.v1Requests === 0 && s.v2Requests! > 0 : s.v2Requests === 0 && s.v1Requests! > 0, `framing: v2 ${s.v2Requests}, v1 ${s.v1Requests}`);
        if (m.pooled) assert.ok(s.connectionsAccepted! <= 8, `pooled: ${s.connectionsAccepted} connections`);
        else assert.is(s.connectionsAccepted, s.writes, 'one connection per request');
        region.fill(0x3c);
        const r = await runInitiator({ segment: t.mooncakeSegment!, op: 'read', blockSize: BLOCK, batchSize: BATCH, threads: 2, seconds: 1, env: m.env });
        assert.is(r.code, 0, `the initiator failed (te's counters: ${JSON.stringify(t.stats())}):\n${r.log.slice(-2000)}`);
        assert.is(t.stats().reads, r.batches * BATCH);
        assert.is(t.stats().bytesRead, r.batches * BATCH * BLOCK);
        assert.ok(
          region.every((b) => b === 0x3c),
          'reads change nothing',
        );
        assert.is(t.stats().rejected, 0);
      } finally {
        await t.close();
      }
    });
  }

  test("Mooncake initiator addressing past te's registered memory: rejected, the initiator fails, nothing lands outside", async () => {
    const t = await wire({ listen: true });
    try {
      // The initiator addresses BATCH blocks from the first buffer; te registered only 4 of them.
      const { all, region } = await guarded(t, BLOCK * 4, 65536, 0xa5);
      const w = await runInitiator({
        segment: t.mooncakeSegment!,
        op: 'write',
        blockSize: BLOCK,
        batchSize: BATCH,
        seconds: 1,
        env: { MC_TCP_ENABLE_CONNECTION_POOL: '1' },
      });
      assert.is.not(w.code, 0, 'the initiator reports the failure');
      assert.ok(t.stats().rejected! >= 1);
      const outside = [...all.subarray(0, 65536), ...all.subarray(65536 + region.length)];
      assert.ok(
        outside.every((b) => b === 0xa5),
        'no byte outside the registered region changed',
      );
    } finally {
      await t.close();
    }
  });
}

test.run();
