// The JS thread never waits on bulk work: a large transfer to the engine's own segment is
// copied off the JS thread. Shown without a speed floor: a 1 ms interval timer keeps firing
// while the bytes land, and some of its ticks see a destination that is partly written (the
// copy in progress on another thread), which a copy run on the JS thread could never show.
// Every byte is compared after each transfer.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { MiB, PROVIDERS, initiator } from './helpers.js';

test('the event loop keeps running while 1 GiB is copied to the own segment, and every byte lands', async () => {
  const engine = await initiator(PROVIDERS[0]);
  try {
    const size = 256 * MiB;
    const chunks = size / MiB;
    // Random bytes tiled per MiB, each MiB stamped with its index: a misplaced MiB shows.
    const a = new Uint8Array(size);
    const block = randomBytes(MiB);
    for (let j = 0; j < chunks; j++) {
      a.set(block, j * MiB);
      a[j * MiB] = (j % 255) + 1; // never 0: a sampled byte is "landed" once it is non-zero
      a[j * MiB + 1] = j >> 8;
    }
    const b = new Uint8Array(size);
    const ha = await engine.registerMemory(a);
    const hb = await engine.registerMemory(b);
    /** How many of the per-MiB stamps have landed in b (0 to `chunks`). */
    const landed = () => {
      let n = 0;
      for (let j = 0; j < chunks; j++) if (b[j * MiB] !== 0) n++;
      return n;
    };
    let ticks = 0;
    let midCopy = 0; // ticks that saw some stamps landed and some not
    let maxGap = 0;
    let pending = false;
    let last = performance.now();
    const tick = setInterval(() => {
      const now = performance.now();
      maxGap = Math.max(maxGap, now - last);
      last = now;
      if (!pending) return;
      ticks++;
      const n = landed();
      if (n > 0 && n < chunks) midCopy++;
    }, 1);
    const started = Date.now();
    try {
      for (let k = 0; k < 4; k++) {
        b.fill(0);
        pending = true;
        await engine.write(engine.segmentName, ha.addr, hb.addr, size);
        pending = false;
        assert.ok(Buffer.from(b.buffer, b.byteOffset, size).equals(Buffer.from(a.buffer, a.byteOffset, size)), `transfer ${k}: every byte landed`);
      }
    } finally {
      clearInterval(tick);
    }
    const took = Date.now() - started;
    const seen = `${ticks} ticks during the transfers, ${midCopy} of them mid-copy, longest gap ${maxGap.toFixed(1)} ms, 1 GiB in ${took} ms`;
    if (process.env.TE_TEST_VERBOSE) console.log(`  ${seen}`);
    assert.ok(midCopy > 0, `no timer tick ran while bytes were landing: the JS thread was blocked by the copy (${seen})`);
    await engine.unregisterMemory(ha);
    await engine.unregisterMemory(hb);
  } finally {
    await engine.close();
  }
});

test.run();
