// One process of the chaos soak (scripts/chaos.mjs), driven over Node's IPC channel:
//   bootstrap   a prefill instance's bootstrap server, alone in its process (to be restarted);
//   prefill     one prefill rank (KV manager over mooncake-tcp, layerwise on), optionally
//               the EC producer on the same engine;
//   decode      one decode rank, optionally the EC consumer on the same engine.
// Every room is answered exactly once with how it ended on this rank; a decode checks
// every byte of a room that succeeded, and keeps a digest of a failed room's pages so
// the driver can ask later whether they changed.
import { createHash } from 'node:crypto';
import { readdirSync, readlinkSync } from 'node:fs';
import { KVStatus, createTransferEngine, isTransferError } from '@te/connector';
import { BootstrapServer, createECConsumer, createECProducer, createKVManager } from '@te/disagg';
import { fillSeeded, pageSeed, wrongBytes } from './pattern.mjs';

const spec = JSON.parse(process.env.TE_CHAOS_SPEC);
// The driver is gone (ended by a signal or killed): end at once rather than serve on for good.
// SIGKILL, not process.exit(), which can hang in V8's platform shutdown (nodejs/node#54918).
process.on('disconnect', () => process.kill(process.pid, 'SIGKILL'));
if (!process.connected) process.kill(process.pid, 'SIGKILL'); // gone while this module loaded
const send = (m) => process.send?.(m);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function errorOf(e) {
  const room = e?.details?.room;
  return {
    code: isTransferError(e) ? e.code : 'Error',
    message: String(e?.message ?? e).slice(0, 400),
    room: typeof room === 'bigint' ? room.toString() : undefined,
    pagesMayBeWritten: e?.details?.pagesMayBeWritten === true,
  };
}

/** Open descriptors, and how many of them are sockets (those follow the peers that are up). */
function fds() {
  try {
    const list = readdirSync('/proc/self/fd');
    let sockets = 0;
    for (const f of list) {
      try {
        if (readlinkSync(`/proc/self/fd/${f}`).startsWith('socket:')) sockets++;
      } catch {
        // closed meanwhile (the listing's own descriptor)
      }
    }
    return { fds: list.length, socketFds: sockets };
  } catch {
    return { fds: -1, socketFds: -1 };
  }
}

if (spec.role === 'bootstrap') {
  const server = await BootstrapServer.start({ host: spec.host, port: spec.port });
  process.on('message', (m) => {
    if (m.op === 'sample') send({ id: m.id, ok: true, value: { rss: process.memoryUsage().rss, ...fds(), tables: {} } });
    else if (m.op === 'close') void server.close().then(() => process.exit(0));
  });
  send({ event: 'ready', port: server.port });
} else {
  try {
    await rank();
  } catch (e) {
    // The driver retries a restart whose port is still taken; it needs to know why it failed.
    send({ event: 'startFailed', message: `${errorOf(e).code}: ${errorOf(e).message}` });
    setTimeout(() => process.exit(1), 100);
  }
}

async function rank() {
  const r = await openRank();
  const ops = {
    send: (a) => sendRoom(r, a),
    receive: (a) => receiveRoom(r, a),
    /** Whether a failed room's pages still hold what they held when it failed. */
    async unchanged(a) {
      const f = r.failedDigests.get(a.room);
      r.failedDigests.delete(a.room);
      if (!f) return { known: false };
      return { known: true, unchanged: digestOf(r, f.pages, f.auxSlot) === f.digest };
    },
    ecSave: (a) => ecSave(r, a),
    ecLoad: (a) => ecLoad(r, a),
    sample: async () => sample(r),
    async close() {
      await r.producer?.close();
      await r.consumer?.close();
      await r.manager.close();
      await r.engine.close();
      setImmediate(() => process.exit(0));
      return true;
    },
  };
  process.on('message', (msg) => {
    ops[msg.op](msg.args).then(
      (value) => send({ id: msg.id, ok: true, value }),
      (e) => send({ id: msg.id, ok: false, error: `${errorOf(e).code}: ${errorOf(e).message}` }),
    );
  });
  send({ event: 'ready', segment: r.engine.segmentName });
}

/** The rank's engine, its memory (KV buffers, aux, EC destination), its KV manager and, if it has one, its EC side. */
async function openRank() {
  const m = spec.model;
  const engine = await createTransferEngine({ connector: 'mooncake-tcp', bindAddress: spec.host, logLevel: 'error', metadata: { port: spec.controlPort } });
  const memory = await allocateRankMemory(engine, m);
  const manager = await createKVManager({
    role: spec.role,
    layout: spec.layout,
    buffers: memory.buffers,
    engine,
    bootstrapHost: spec.bootstrap.host,
    bootstrapPort: spec.bootstrap.port,
    serveBootstrap: false,
    layerwise: spec.role === 'prefill',
    timeouts: spec.timeouts,
  });
  const producer = spec.ec === 'producer' ? await createECProducer({ engine, poolBytes: 8 << 20 }) : undefined;
  const consumer = spec.ec === 'consumer' ? await createECConsumer({ engine, loadTimeoutMs: 4_000 }) : undefined;
  return {
    m,
    engine,
    ...memory,
    manager,
    producer,
    consumer,
    shard: spec.layout.attnTpRank,
    /** Digests of failed rooms' destination pages, until the driver checks them. */
    failedDigests: new Map(),
    /** Rooms whose status moved after it ended (must stay empty). */
    movedAfterEnd: 0,
    live: 0,
  };
}

/** One allocation: KV buffers (K and V of each layer), then aux, then EC's destination; views of each page and slot. */
async function allocateRankMemory(engine, m) {
  const heads = m.heads / spec.layout.attnTpSize;
  const itemLen = m.pageSize * heads * m.headBytes;
  const nKv = 2 * m.layers;
  const kvBytes = itemLen * m.pages;
  const auxBytes = m.auxSlots * m.auxItem;
  const ecBytes = spec.ec === 'consumer' ? m.ecSlots * m.ecItem : 0;
  const mem = await engine.allocateMemory(nKv * kvBytes + auxBytes + ecBytes);
  const view = mem.buffer;
  view.fill(0xee);
  const kvView = (k) => view.subarray(k * kvBytes, (k + 1) * kvBytes);
  const auxView = view.subarray(nKv * kvBytes, nKv * kvBytes + auxBytes);
  const group = (n, len, item, base) => ({
    addrs: BigUint64Array.from({ length: n }, (_, i) => mem.addr + BigInt(base + i * len)),
    lengths: BigUint64Array.from({ length: n }, () => BigInt(len)),
    itemLengths: BigUint64Array.from({ length: n }, () => BigInt(item)),
  });
  const buffers = {
    kv: group(nKv, kvBytes, itemLen, 0),
    attention: 'mha',
    numLayers: m.layers,
    firstLayer: 0,
    totalLayers: m.layers,
    pageSize: m.pageSize,
    kvCacheDtype: 'bf16',
    kvHeadsPerRank: heads,
    totalKvHeads: m.heads,
    headBytes: m.headBytes,
    aux: group(1, auxBytes, m.auxItem, nKv * kvBytes),
    device: 'cpu',
  };
  return {
    mem,
    view,
    buffers,
    nKv,
    ecBase: nKv * kvBytes + auxBytes,
    page: (k, p) => kvView(k).subarray(p * itemLen, (p + 1) * itemLen),
    aux: (slot) => auxView.subarray(slot * m.auxItem, (slot + 1) * m.auxItem),
  };
}

function digestOf(r, pages, auxSlot) {
  const h = createHash('sha256');
  for (let k = 0; k < r.nKv; k++) for (const p of pages) h.update(r.page(k, p));
  h.update(r.aux(auxSlot));
  return h.digest('hex');
}

/** Watches a sender's or receiver's status: one end, never a change after it. */
function watchEnd(r, cell) {
  let ended = false;
  cell.on('status', (s) => {
    if (ended) r.movedAfterEnd++;
    if (s === KVStatus.Success || s === KVStatus.Failed) ended = true;
  });
}

/** The prefill side of a room: seeded pages sent one-shot, in chunks or layer by layer; how it ended. */
async function sendRoom(r, a) {
  const { m, manager, nKv, page, aux } = r;
  const room = BigInt(a.room);
  const pages = Uint32Array.from(a.pages);
  for (let k = 0; k < nKv; k++) for (let i = 0; i < pages.length; i++) fillSeeded(page(k, pages[i]), pageSeed(room, k, i, r.shard));
  fillSeeded(aux(a.auxSlot), pageSeed(room, 1000, 0, 0));
  const sender = manager.createSender({ host: spec.bootstrap.host, port: spec.bootstrap.port, room });
  watchEnd(r, sender.cell);
  r.live++;
  const started = Date.now();
  if (a.abortAfterMs !== undefined) setTimeout(() => void sender.abort('chaos: aborted by the prefill').catch(() => undefined), a.abortAfterMs);
  try {
    sender.init(pages.length, a.auxSlot);
    if (a.mode === 'layerwise') {
      await sender.cell.reached(KVStatus.WaitingForInput, { timeoutMs: spec.timeouts.bootstrapMs + 2_000 });
      const batch = manager.beginBatch([{ sender, pages }]);
      for (let l = 0; l < m.layers; l++) {
        await sleep(1);
        batch.layerReady(l);
      }
      await batch.finish();
    } else {
      const per = Math.ceil(pages.length / a.chunks);
      for (let c = 0; c < a.chunks; c++)
        await sender.send(pages.subarray(c * per, Math.min(pages.length, (c + 1) * per)), c === a.chunks - 1 ? { last: true } : {});
    }
    await sender.cell.reached(KVStatus.Success, { timeoutMs: a.endMs });
  } catch {
    // how it ended is read below
  }
  // The pages may be reused once no write of the room is in flight.
  if (sender.status === KVStatus.Failed) await sender.abort().catch(() => undefined);
  r.live--;
  const out = { status: sender.status, ms: Date.now() - started, layerwise: manager.layerwiseStats.layerwiseRooms };
  return sender.status === KVStatus.Failed ? { ...out, ...errorOf(sender.failure) } : out;
}

/** The decode side of a room: how it ended, every byte checked on Success, a failed room's pages digested for `unchanged`. */
async function receiveRoom(r, a) {
  const room = BigInt(a.room);
  const pages = Uint32Array.from(a.pages);
  const receiver = r.manager.createReceiver({ host: spec.bootstrap.host, port: a.bootstrapPort, room, prefillDpRank: 0 });
  watchEnd(r, receiver.cell);
  r.live++;
  const started = Date.now();
  let abortError;
  let aborting;
  const abortTimer =
    a.abortAfterMs === undefined
      ? undefined
      : setTimeout(() => (aborting = receiver.abort('chaos: aborted by the decode').catch((e) => void (abortError = e))), a.abortAfterMs);
  try {
    await receiver.init(pages, a.auxSlot);
    await receiver.cell.reached(KVStatus.Success, { timeoutMs: a.endMs });
  } catch {
    // how it ended is read below
  }
  clearTimeout(abortTimer);
  // The decode's own abort() shows Failed at once; the pages are free once it resolved
  // (every prefill rank acknowledged that no write of the room is in flight).
  if (aborting) await aborting;
  r.live--;
  const out = { status: receiver.status, ms: Date.now() - started };
  if (receiver.status === KVStatus.Success) return { ...out, wrong: wrongBytesOfRoom(r, room, pages, a) };
  if (receiver.status !== KVStatus.Failed) return { ...out, code: 'NOT_ENDED', message: `status ${receiver.status} after ${a.endMs} ms` };
  const error = errorOf(receiver.failure);
  if (abortError?.details?.pagesMayBeWritten) error.pagesMayBeWritten = true;
  if (!error.pagesMayBeWritten) r.failedDigests.set(a.room, { digest: digestOf(r, pages, a.auxSlot), pages, auxSlot: a.auxSlot });
  return { ...out, ...error };
}

function wrongBytesOfRoom(r, room, pages, a) {
  let wrong = 0;
  for (let k = 0; k < r.nKv; k++) for (let i = 0; i < pages.length; i++) wrong += wrongBytes(r.page(k, pages[i]), pageSeed(room, k, i, r.shard));
  if (a.sendsAux) wrong += wrongBytes(r.aux(a.auxSlot), pageSeed(room, 1000, 0, 0));
  return wrong;
}

async function ecSave(r, a) {
  const data = new Uint8Array(a.length);
  fillSeeded(data, pageSeed(BigInt(a.seed), 2000, 0, 0));
  try {
    return { params: { [a.hash]: await r.producer.save(a.hash, data, { dtype: 'bf16' }) } };
  } catch (e) {
    return errorOf(e);
  }
}

async function ecLoad(r, a) {
  const { m, mem, view, ecBase } = r;
  const where = new Map();
  r.consumer.startLoad(a.params, (hash, length) => {
    where.set(hash, Number(length));
    return { addr: mem.addr + BigInt(ecBase + a.slot * m.ecItem) };
  });
  const loaded = await r.consumer.waitForLoad();
  const wrong = loaded.loaded.reduce(
    (n, h) => n + wrongBytes(view.subarray(ecBase + a.slot * m.ecItem, ecBase + a.slot * m.ecItem + where.get(h)), pageSeed(BigInt(a.seed), 2000, 0, 0)),
    0,
  );
  return { loaded: loaded.loaded.length, failed: loaded.failed.map((f) => f.error?.code ?? 'Error'), wrong };
}

/** RSS, descriptors and the size of every runtime table (all back to empty after the load). */
function sample(r) {
  const rank = r.manager.rank ?? {};
  const size = (x) => (x instanceof Map || x instanceof Set ? x.size : undefined);
  const tables = { live: r.live, movedAfterEnd: r.movedAfterEnd, failedDigests: r.failedDigests.size };
  for (const name of ['senders', 'pending', 'aborted', 'unconfirmed', 'destinations', 'receivers', 'registered', 'clients']) {
    const n = size(rank[name]);
    if (n !== undefined) tables[name] = n;
  }
  if (r.producer) tables.ecPool = r.producer.pool.count;
  return { rss: process.memoryUsage().rss, ...fds(), tables };
}
