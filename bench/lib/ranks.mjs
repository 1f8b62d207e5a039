// Process plumbing shared by the PD benchmarks: a rank is this script forked with
// `--rank <json>`, answering ops over Node's IPC channel.
import { fork } from 'node:child_process';
import { exitWithParent } from '@te/testkit';

// The host's monotonic clock, ms: the same clock in every rank, so a time taken in one
// process can be subtracted from one taken in another. performance.timeOrigin is fixed per
// process from the wall clock at its start, and a wall clock stepped between two starts
// puts two processes' readings milliseconds apart.
export const now = () => Number(process.hrtime.bigint()) / 1e6;
/** The middle value; for an even count, the mean of the two middle ones. */
export const median = (xs) => {
  const v = [...xs].sort((a, b) => a - b);
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
};
export const percentile = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))];

// Outside the ephemeral range, so a rank's connections cannot take the bootstrap port first.
export { freePort } from '@te/testkit';

/** Forks `script --rank <spec>`; resolves with `call(op, args)` once the rank said it is ready. */
export function spawnRank(script, spec) {
  const child = fork(script, ['--rank', JSON.stringify(spec)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  let next = 1;
  const pending = new Map();
  child.on('message', (m) => {
    if (m.id === undefined) return;
    const p = pending.get(m.id);
    pending.delete(m.id);
    m.ok ? p.resolve(m.value) : p.reject(new Error(m.error));
  });
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`rank exited (${code})`)));
    child.once('message', () =>
      resolve({
        call: (op, a = {}) => new Promise((res, rej) => (pending.set(next, { resolve: res, reject: rej }), child.send({ id: next++, op, args: a }))),
        kill: () => child.kill('SIGKILL'),
      }),
    );
  });
}

/** In a rank: serves `ops` over IPC and tells the parent it is ready. */
export function serveRank(ops) {
  // The benchmark that started this rank is gone (finished, killed, interrupted): so is this rank.
  exitWithParent();
  process.on('message', (m) =>
    ops[m.op](m.args).then(
      (value) => process.send({ id: m.id, ok: true, value }),
      (e) => process.send({ id: m.id, ok: false, error: `${e.code ?? 'Error'}: ${e.message}` }),
    ),
  );
  process.send({ ready: true });
}

export async function closeRanks(ranks) {
  await Promise.all(ranks.map((r) => r.call('close').catch(() => r.kill())));
}

/**
 * A rank's GQA KV buffers (MHA layout, K then V per layer) from the engine's allocator,
 * plus one aux buffer, as KVBuffers.
 */
export async function gqaBuffers(engine, { layers, pages, heads, headsTotal, headBytes, pageSize, fill }) {
  const item = pageSize * heads * headBytes;
  const nBuf = 2 * layers;
  const mem = await engine.allocateMemory(nBuf * item * pages);
  // Position-dependent words everywhere (a constant or sparse fill would hide a misplaced slice).
  if (fill) {
    const words = new Uint32Array(mem.buffer.buffer, mem.buffer.byteOffset, mem.buffer.byteLength >>> 2);
    for (let i = 0; i < words.length; i++) words[i] = Math.imul(i, 2654435761) ^ fill;
  }
  const aux = await engine.allocateMemory(64 * 64);
  const addrs = Array.from({ length: nBuf }, (_, i) => mem.addr + BigInt(i * item * pages));
  const group = (a, len, it) => ({
    addrs: BigUint64Array.from(a),
    lengths: BigUint64Array.from(a.map(() => BigInt(len))),
    itemLengths: BigUint64Array.from(a.map(() => BigInt(it))),
  });
  return {
    mem,
    item,
    bytes: nBuf * item * pages,
    buffers: {
      kv: group(addrs, item * pages, item),
      attention: 'mha',
      numLayers: layers,
      pageSize,
      kvCacheDtype: 'fp16',
      totalKvHeads: headsTotal,
      aux: group([aux.addr], 64 * 64, 64),
      device: 'cpu',
    },
  };
}

export function layoutOf(tp, rank) {
  return { attnTpSize: tp, attnTpRank: rank, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };
}

/**
 * sha256 over, for every KV buffer in order and every listed page in order, heads
 * [headOffset, headOffset + heads) of the page: what a decode rank holding those heads must
 * hold at its destination pages. NHD pages (`[token][head][bytes]`) are read token row by
 * row; HND pages (`[head][token][bytes]`) hold the heads as one range.
 */
export async function headsDigest(view, { buffers, item, pages, pageSize, headBytes, rowHeads, headOffset, heads, bufferBytes, pageLayout = 'NHD' }) {
  const { createHash } = await import('node:crypto');
  const h = createHash('sha256');
  const row = rowHeads * headBytes;
  for (let b = 0; b < buffers; b++) {
    for (const p of pages) {
      const base = b * bufferBytes + p * item;
      if (pageLayout === 'HND') h.update(view.subarray(base + headOffset * pageSize * headBytes, base + (headOffset + heads) * pageSize * headBytes));
      else if (headOffset === 0 && heads === rowHeads) h.update(view.subarray(base, base + item));
      else
        for (let t = 0; t < pageSize; t++) h.update(view.subarray(base + t * row + headOffset * headBytes, base + t * row + (headOffset + heads) * headBytes));
    }
  }
  return h.digest('hex');
}
