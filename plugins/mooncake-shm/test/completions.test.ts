import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { batchOf } from '@te/connector';
import { createEndpoint, pattern, register, type Endpoint } from './helpers.js';

/*
 * How a target answers: a deep window of copies (many batches queued on one connection) is
 * answered in fewer messages than it has batches, while every batch still completes with its
 * bytes landed; a window of one small batch at a time is answered batch by batch.
 */
const KiB = 1024;
const PER_BATCH = 16;
const SIZE = 64 * KiB;
const IN_FLIGHT = 16;

/** COMPLETIONS messages the target `t` has sent so far. */
const completionMessages = (t: Endpoint): number => (t.transport.describe!().copies as { completionMessages: number }).completionMessages;

/**
 * An initiator and a target with 16 MiB registered on each side (`src` written from, `dst`
 * written to) and a connection between them; batch(k) is the k-th of IN_FLIGHT batches of
 * PER_BATCH × SIZE writes, each over its own slice.
 */
async function deepWindow(name: string, seed: number) {
  const a = await createEndpoint(`${name}-initiator`);
  const b = await createEndpoint(`${name}-target`);
  const bytes = PER_BATCH * SIZE * IN_FLIGHT; // 16 MiB queued on one connection
  const src = pattern(seed, bytes);
  const dst = new Uint8Array(bytes);
  const local = await register(a.transport, src, false);
  const remote = await register(b.transport, dst);
  const peer = await a.transport.openPeer(b.descriptor());
  const batch = (k: number) =>
    batchOf(
      Array.from({ length: PER_BATCH }, (_, i) => {
        const off = BigInt((k * PER_BATCH + i) * SIZE);
        return { op: 'write' as const, local: local + off, remote: remote + off, length: SIZE };
      }),
    );
  return { a, b, src, dst, peer, batch };
}

test('a deep window is answered in fewer messages than batches; every byte lands', async () => {
  const { a, b, src, dst, peer, batch } = await deepWindow('completions', 31);
  try {
    const rounds = 4;
    const before = completionMessages(b);
    for (let round = 0; round < rounds; round++) {
      dst.fill(0);
      const results = await Promise.all(Array.from({ length: IN_FLIGHT }, (_, k) => a.transport.submit(peer, batch(k), { timeoutMs: 10_000 })));
      for (const r of results) assert.equal([...r.statuses], new Array(PER_BATCH).fill(0));
      assert.ok(Buffer.compare(dst, src) === 0, `round ${round}: the target's buffer differs from what was written`);
    }
    const sent = completionMessages(b) - before;
    // One message per batch (or more) is what answering each 1 MiB of copies gives.
    assert.ok(sent > 0 && sent < rounds * IN_FLIGHT, `${sent} completion messages for ${rounds * IN_FLIGHT} batches`);
  } finally {
    await a.transport.close();
    await b.transport.close();
  }
});

test('a window kept full (each batch sent again as it completes) is answered in fewer messages than batches', async () => {
  // The steady state of a deep window: the initiator's messages arrive while completions of
  // earlier batches are waiting, and such a message must not send them (that answered about
  // once per batch, undoing finish()'s coalescing).
  const { a, b, src, dst, peer, batch } = await deepWindow('completions-steady', 33);
  try {
    const resends = 8;
    const before = completionMessages(b);
    const worker = async (k: number): Promise<void> => {
      const own = batch(k);
      for (let n = 0; n < resends; n++) {
        const r = await a.transport.submit(peer, own, { timeoutMs: 10_000 });
        assert.equal([...r.statuses], new Array(PER_BATCH).fill(0));
      }
    };
    await Promise.all(Array.from({ length: IN_FLIGHT }, (_, k) => worker(k)));
    assert.ok(Buffer.compare(dst, src) === 0, "the target's buffer differs from what was written");
    const sent = completionMessages(b) - before;
    const batches = IN_FLIGHT * resends;
    // About a third of the batches when messages leave the waiting completions alone; 58-79% of
    // them when every message sent them, on an idle host. On a busy one that fault also stayed
    // under the bound: test/native/shm_deep_window_test.cpp is the case that always catches it.
    assert.ok(sent > 0 && sent < batches / 2, `${sent} completion messages for ${batches} batches`);
  } finally {
    await a.transport.close();
    await b.transport.close();
  }
});

test('one small batch at a time is answered batch by batch', async () => {
  const a = await createEndpoint('completions-small-initiator');
  const b = await createEndpoint('completions-small-target');
  try {
    const src = pattern(32, 16 * KiB);
    const dst = new Uint8Array(16 * KiB);
    const local = await register(a.transport, src, false);
    const remote = await register(b.transport, dst);
    const peer = await a.transport.openPeer(b.descriptor());
    const before = completionMessages(b);
    for (let i = 0; i < 8; i++) {
      const r = await a.transport.submit(
        peer,
        batchOf([0, 1, 2, 3].map((j) => ({ op: 'write' as const, local: local + BigInt(j * 4 * KiB), remote: remote + BigInt(j * 4 * KiB), length: 4 * KiB }))),
        { timeoutMs: 5_000 },
      );
      assert.equal([...r.statuses], [0, 0, 0, 0]);
    }
    assert.ok(Buffer.compare(dst, src) === 0);
    // Each batch waited for its answer before the next was sent: at least one message each.
    // The target counts a message once its send returned, which can be after the initiator
    // already has the answer: the last count is waited for (bounded), not read at once. Read at
    // once, the case failed when the target's thread was switched out between the two.
    const counted = completionMessages(b) - before;
    for (const until = Date.now() + 5_000; completionMessages(b) - before < 8 && Date.now() < until;) await new Promise((r) => setTimeout(r, 1));
    assert.ok(completionMessages(b) - before >= 8, `${completionMessages(b) - before} messages for 8 batches (${counted} when the last answer arrived)`);
  } finally {
    await a.transport.close();
    await b.transport.close();
  }
});

test.run();
