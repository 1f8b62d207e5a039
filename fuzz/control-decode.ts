// Mutation fuzzer for the control plane's decoding (libFuzzer cannot run JavaScript): every
// input goes through
//   1. the decoding stages in process, exactly as the server and the client chain them:
//      msgpack codec -> request envelope schema / id salvage -> reply envelope schema ->
//      segment descriptor check;
//   2. a real ControlServer over zeromq serving the descriptor and the PD protocol's
//      schema-checked messages (the real handleMessage) (a DEALER sends the input, then a
//      canary ping that must be answered: the server is alive and still serving);
//   3. for decodable inputs, a real ControlClient whose hostile server answers a descriptor
//      request with the input (its id patched to match): the fetch must settle with a
//      descriptor that passed the check, or a TransferError.
// Failures: a check stage throwing anything but a TransferError, the codec throwing a
// non-Error, Object.prototype polluted, an unhandled rejection or exception, the server not
// answering the canary, a client request never settling, one input taking over 2 s.
// Inputs come from fuzz/corpus/control_plane, mutated bytewise and structurally (decode,
// replace a node with a hostile value, re-encode); an input that produces a new outcome
// (reply code, first schema path) joins the in-memory corpus. A failing input is written to
// fuzz/crashes/control_decode-<sha1> and the run exits 1.
//   node --import tsx fuzz/control-decode.ts [seconds=60] [seed]
//   node --import tsx fuzz/control-decode.ts --replay <file>...
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Dealer, Router } from 'zeromq';
import { TransferError as DistTransferError } from '@te/connector';
import { TransferError } from '../packages/connector/src/errors/transfer-error.js';
import { ControlServer } from '../packages/connector/src/engine/control-plane.js';
import { decodeMessage, encodeMessage } from '../packages/connector/src/engine/codec.js';
import { P2PHandshake } from '../packages/connector/src/engine/metadata.js';
import { checkDescriptor } from '../packages/connector/src/engine/descriptor-check.js';
import { checkReplyEnvelope, checkRequestEnvelope, salvageId } from '../packages/connector/src/engine/messages.js';
import { handleMessage } from '../packages/disagg/src/protocol/handle.js';
import { AbortSchema, MSG, PingSchema, RegisterSchema, RequestSchema, StatusSchema } from '../packages/disagg/src/protocol/messages.js';

const here = dirname(fileURLToPath(import.meta.url));
const corpusDir = join(here, 'corpus', 'control_plane');
const crashDir = join(here, 'crashes');
const MAX_INPUT = 256 * 1024;
const CANARY_TIMEOUT_MS = 2_000;

class FuzzFailure extends Error {}

// ---------------------------------------------------------------- deterministic randomness
let state = 0n;
function seedRandom(seed: bigint): void {
  state = seed & 0xffffffffffffffffn || 1n;
}
/** xorshift64*: reproducible from the printed seed. */
function next(): number {
  state ^= state >> 12n;
  state ^= (state << 25n) & 0xffffffffffffffffn;
  state ^= state >> 27n;
  return Number(((state * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn) >> 32n);
}
const rand = (n: number): number => (n <= 0 ? 0 : next() % n);
const pick = <T>(xs: readonly T[]): T => xs[rand(xs.length)]!;

// ---------------------------------------------------------------- mutators
const INTERESTING8 = [0x00, 0x01, 0x7f, 0x80, 0xff, 0xc0, 0xc1, 0xd4, 0xd9, 0xdc, 0xdd, 0xde, 0xdf, 0xc7, 0xc8, 0xc9];
const INTERESTING32 = [0, 1, 0x7fffffff, 0x80000000, 0xffffffff, 0x10000, 0xffff];

function mutateBytes(input: Buffer, corpus: Buffer[]): Buffer {
  let b = Buffer.from(input);
  const rounds = 1 + rand(4);
  for (let r = 0; r < rounds; r++) {
    const pos = rand(b.length + 1);
    switch (rand(9)) {
      case 0:
        if (b.length) b[rand(b.length)] ^= 1 << rand(8);
        break;
      case 1:
        if (b.length) b[rand(b.length)] = rand(256);
        break;
      case 2:
        if (b.length) b[rand(b.length)] = pick(INTERESTING8);
        break;
      case 3:
        if (b.length >= 4) b.writeUInt32BE(pick(INTERESTING32), rand(b.length - 3));
        break;
      case 4:
        b = Buffer.concat([b.subarray(0, pos), Buffer.from([pick(INTERESTING8), rand(256)]), b.subarray(pos)]);
        break;
      case 5:
        if (b.length) b = Buffer.concat([b.subarray(0, pos), b.subarray(Math.min(b.length, pos + 1 + rand(16)))]);
        break;
      case 6: {
        // duplicate a chunk
        const start = rand(b.length),
          len = rand(Math.min(64, b.length - start) + 1);
        b = Buffer.concat([b.subarray(0, pos), b.subarray(start, start + len), b.subarray(pos)]);
        break;
      }
      case 7: {
        // splice with another input
        const other = pick(corpus);
        const cut = rand(other.length + 1);
        b = Buffer.concat([b.subarray(0, pos), other.subarray(cut)]);
        break;
      }
      case 8:
        b = b.subarray(0, pos);
        break; // truncate
    }
  }
  return b.length > MAX_INPUT ? b.subarray(0, MAX_INPUT) : b;
}

/** A value a hostile peer could encode; sizes stay well under the 16 MiB message cap. */
function hostileValue(depth = 0): unknown {
  switch (rand(24)) {
    case 0:
      return null;
    case 1:
      return undefined;
    case 2:
      return pick([0, -0, -1, 1, 0.5, NaN, Infinity, -Infinity, 2 ** 31, 2 ** 32, 2 ** 53, -(2 ** 53), Number.MAX_VALUE]);
    case 3:
      return pick([0n, 1n, -1n, 2n ** 63n - 1n, 2n ** 64n - 1n, -(2n ** 63n), 0x4000n]);
    case 4:
      return pick(['', 'x', '__proto__', 'constructor', 'toString', 'te.descriptor.get', MSG.register, MSG.request, '\u0000', '\ud800']);
    case 5:
      return 'A'.repeat(pick([127, 128, 129, 4096, 4097, 70_000]));
    case 6:
      return rand(2) === 0;
    case 7:
      return new Uint32Array(rand(64)).map(() => next());
    case 8:
      return new BigUint64Array(rand(16)).map(() => BigInt(next()) << 20n);
    case 9:
      return pick([new Float64Array(3), new Int8Array(5), new Uint8Array(7), new BigInt64Array(2), new Uint16Array(0)]);
    case 10:
      return Buffer.alloc(rand(128), rand(256));
    case 11:
      return new Date(next());
    case 12:
      return new Map([[hostileKey(), hostileValue(depth + 1)]]);
    case 13:
      return new Set([hostileValue(depth + 1)]);
    case 14:
      return new Error(`e${next()}`);
    case 15:
      return /x+/g;
    case 16: {
      // deep nesting (recursion in a decoder or a schema walk)
      let v: unknown = 1;
      for (let i = 0, n = pick([10, 100, 1000, 5000]); i < n; i++) v = rand(2) ? [v] : { a: v };
      return v;
    }
    case 17:
      return new Array(rand(2000)).fill(0).map(() => rand(4));
    case 18:
      return { toString: 0, valueOf: 0 };
    default: {
      if (depth > 4) return rand(100);
      if (rand(2)) return Array.from({ length: rand(5) }, () => hostileValue(depth + 1));
      const o: Record<string, unknown> = {};
      for (let i = 0, n = rand(5); i < n; i++)
        Object.defineProperty(o, hostileKey(), { value: hostileValue(depth + 1), enumerable: true, configurable: true, writable: true });
      return o;
    }
  }
}
function hostileKey(): string {
  return pick([
    'v',
    'id',
    'type',
    'body',
    'ok',
    'code',
    'message',
    'room',
    'pages',
    'addrs',
    'segment',
    'epoch',
    'name',
    'buffers',
    'transports',
    'addr',
    'length',
    'device',
    '__proto__',
    'constructor',
    'prototype',
    'toString',
    '',
    'x'.repeat(300),
  ]);
}

/** Decodes an input, replaces (or adds) one node with a hostile value and re-encodes it. */
function mutateStructure(input: Buffer): Buffer | undefined {
  let root: unknown;
  try {
    root = decodeMessage(input);
  } catch {
    return undefined;
  }
  const holder = { root };
  // Walk to a random container.
  let parent: Record<string, unknown> = holder;
  let key = 'root';
  for (let d = 0; d < 6; d++) {
    const v = parent[key];
    if (typeof v !== 'object' || v === null || ArrayBuffer.isView(v) || v instanceof Map || v instanceof Set || v instanceof Date) break;
    const keys = Object.keys(v);
    if (keys.length === 0 || rand(3) === 0) break;
    parent = v as Record<string, unknown>;
    key = pick(keys);
  }
  const target = parent[key];
  if (rand(4) === 0 && typeof target === 'object' && target !== null && !Array.isArray(target)) {
    Object.defineProperty(target, hostileKey(), { value: hostileValue(), enumerable: true, configurable: true, writable: true });
  } else if (rand(6) === 0 && typeof target === 'object' && target !== null && !ArrayBuffer.isView(target)) {
    delete (target as Record<string, unknown>)[pick(Object.keys(target))];
  } else {
    parent[key] = hostileValue();
  }
  try {
    const out = encodeMessage(holder.root);
    return out.length > MAX_INPUT ? undefined : out;
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------- the stages in process
const isTypedError = (e: unknown): boolean => (e instanceof TransferError || e instanceof DistTransferError) && typeof (e as TransferError).code === 'string';
const prototypeKeys = Object.getOwnPropertyNames(Object.prototype).sort().join(',');

/** Runs every check stage on one input; returns an outcome signature, throws FuzzFailure. */
function checkInProcess(input: Buffer): { decoded: unknown; decodedOk: boolean; signature: string } {
  let decoded: unknown;
  try {
    decoded = decodeMessage(input);
  } catch (e) {
    // Undecodable bytes are dropped by the server before any field is read (by design);
    // the codec must still fail as an Error, not with a thrown primitive.
    if (!(e instanceof Error)) throw new FuzzFailure(`codec threw a non-Error: ${String(e)}`);
    return { decoded: undefined, decodedOk: false, signature: `codec:${e.constructor.name}` };
  } finally {
    // A polluted prototype outranks whatever the decode returned or threw: it is the finding.
    // eslint-disable-next-line no-unsafe-finally -- the fuzzer's verdict must replace the result
    if (Object.getOwnPropertyNames(Object.prototype).sort().join(',') !== prototypeKeys) throw new FuzzFailure('Object.prototype was changed by decoding');
  }
  const sig: string[] = [];
  const stage = (name: string, fn: () => unknown): void => {
    try {
      const r = fn();
      sig.push(`${name}:${typeof r === 'boolean' ? r : 'ok'}`);
    } catch (e) {
      if (!isTypedError(e))
        throw new FuzzFailure(`${name} threw ${e instanceof Error ? `${e.constructor.name}: ${e.message}` : String(e)} (not a TransferError)`);
      sig.push(`${name}:${(e as TransferError).code}`);
    }
  };
  stage('request', () => {
    const ok = checkRequestEnvelope.Check(decoded);
    if (!ok) {
      salvageId(decoded);
      const first = checkRequestEnvelope.Errors(decoded).First();
      sig.push(`rq@${first?.path ?? ''}`);
    }
    return ok;
  });
  stage('reply', () => checkReplyEnvelope.Check(decoded));
  const body = typeof decoded === 'object' && decoded !== null ? (decoded as { body?: unknown }).body : undefined;
  stage('descriptor', () => checkDescriptor(body, 'fuzz-peer'));
  return { decoded, decodedOk: true, signature: sig.join(' ') };
}

// ---------------------------------------------------------------- the real server and client
interface Rig {
  server: ControlServer;
  endpoint: string;
  dealer: Dealer;
  replies: Map<number, { ok: boolean; code?: string; message?: string }>;
  waiters: Map<number, () => void>;
  hostile: Router;
  hostileEndpoint: string;
  handshake: P2PHandshake;
  nextReply: Buffer | undefined;
  close(): Promise<void>;
}

async function startRig(): Promise<Rig> {
  const server = new ControlServer();
  const endpoint = await server.bind('127.0.0.1', 0);
  // The handlers a process serves: the descriptor (P2P handshake) and the PD protocol's
  // schema-checked messages (bodies that pass reach a stub that answers).
  const handshake = new P2PHandshake(server);
  await handshake.publish({ version: 1, name: endpoint, epoch: 7n, transports: {}, buffers: [] } as never);
  const engine = { control: server } as never;
  for (const [type, schema] of [
    [MSG.register, RegisterSchema],
    [MSG.request, RequestSchema],
    [MSG.abort, AbortSchema],
    [MSG.ping, PingSchema],
    [MSG.status, StatusSchema],
  ] as const) {
    handleMessage(engine, type, schema, () => ({ tpRank: 0, ppRank: 0 }));
  }
  const dealer = new Dealer({ linger: 0 });
  dealer.connect(`tcp://${endpoint}`);
  const replies = new Map<number, { ok: boolean; code?: string; message?: string }>();
  const waiters = new Map<number, () => void>();
  void (async () => {
    try {
      for await (const [payload] of dealer) {
        const r = decodeMessage(payload!) as { id: number; ok: boolean; code?: string; message?: string };
        replies.set(r.id, r);
        waiters.get(r.id)?.();
      }
    } catch {
      // closed
    }
  })();
  // A hostile server for the client side: answers every request with the current input.
  const hostile = new Router({ linger: 0 });
  await hostile.bind('tcp://127.0.0.1:*');
  const hostileEndpoint = hostile.lastEndpoint!.replace(/^tcp:\/\//, '');
  const rig: Rig = {
    server,
    endpoint,
    dealer,
    replies,
    waiters,
    hostile,
    hostileEndpoint,
    handshake,
    nextReply: undefined,
    async close() {
      dealer.close();
      hostile.close();
      await handshake.close();
      await server.close();
    },
  };
  void (async () => {
    try {
      for await (const [identity, payload] of hostile) {
        const req = decodeMessage(payload!) as { id: number };
        const reply = rig.nextReply;
        if (!reply) continue;
        // Patch the id so the client takes the reply as the answer to its request.
        let out = reply;
        try {
          const v = decodeMessage(reply);
          if (typeof v === 'object' && v !== null && !Array.isArray(v) && !ArrayBuffer.isView(v)) {
            (v as { id: unknown }).id = req.id;
            out = encodeMessage(v);
          }
        } catch {
          // undecodable: sent as is
        }
        await hostile.send([identity!, out]);
      }
    } catch {
      // closed
    }
  })();
  return rig;
}

let canaryId = 2 ** 52;
async function throughServer(rig: Rig, input: Buffer, decoded: unknown): Promise<string> {
  const id = ++canaryId;
  const answered = new Promise<void>((resolve) => rig.waiters.set(id, resolve));
  await rig.dealer.send(input);
  await rig.dealer.send(encodeMessage({ v: 1, id, type: MSG.ping, body: { v: 1 } }));
  let timer: NodeJS.Timeout | undefined;
  const ok = await Promise.race([answered.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), CANARY_TIMEOUT_MS)))]);
  clearTimeout(timer);
  rig.waiters.delete(id);
  const canary = rig.replies.get(id);
  rig.replies.delete(id);
  if (!ok || !canary?.ok) throw new FuzzFailure(`the control server did not answer a ping after the input (${ok ? JSON.stringify(canary) : 'no answer'})`);
  // The reply to the input itself, when it had an id to answer to (replies are in order).
  const fid = salvageId(decoded);
  if (fid === undefined || fid === id) return 'srv:-';
  const r = rig.replies.get(fid);
  rig.replies.delete(fid);
  if (!r) return 'srv:none';
  const path = /malformed[^:]*: (\/\S*)/.exec(r.message ?? '')?.[1] ?? '';
  return `srv:${r.ok ? 'ok' : r.code}${path}`;
}

async function throughClient(rig: Rig, input: Buffer): Promise<string> {
  rig.nextReply = input;
  try {
    const d = await rig.handshake.fetch(rig.hostileEndpoint, 100);
    // A descriptor that got through must have passed the check.
    checkDescriptor(d, 'again');
    return 'cli:ok';
  } catch (e) {
    if (!isTypedError(e))
      throw new FuzzFailure(`client fetch rejected with ${e instanceof Error ? `${e.constructor.name}: ${e.message}` : String(e)} (not a TransferError)`);
    return `cli:${(e as TransferError).code}`;
  } finally {
    rig.nextReply = undefined;
  }
}

// ---------------------------------------------------------------- driver
function save(input: Buffer, why: string): string {
  mkdirSync(crashDir, { recursive: true });
  const file = join(crashDir, `control_decode-${createHash('sha1').update(input).digest('hex')}`);
  writeFileSync(file, input);
  console.error(`control_decode: FAILED: ${why}\n  reproducer: ${file} (replay: node --import tsx fuzz/control-decode.ts --replay ${file})`);
  return file;
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const replay = args[0] === '--replay' ? args.slice(1) : undefined;
  const seconds = replay ? 0 : Number(args[0] ?? process.env.TE_FUZZ_SECONDS ?? 60);
  const seed = BigInt(args[1] ?? Date.now());
  seedRandom(seed);
  if (!replay) console.log(`control_decode: ${seconds} s, seed ${seed} (rerun with: node --import tsx fuzz/control-decode.ts ${seconds} ${seed})`);

  let current: Buffer = Buffer.alloc(0);
  const fail = (why: string): never => {
    save(current, why);
    process.exit(1);
  };
  process.on('unhandledRejection', (e) => fail(`unhandled rejection: ${e instanceof Error ? e.stack : String(e)}`));
  process.on('uncaughtException', (e) => fail(`uncaught exception: ${e.stack}`));

  const corpus = (replay ?? readdirSync(corpusDir).map((f) => join(corpusDir, f))).map((f) => readFileSync(f));
  const rig = await startRig();
  const signatures = new Set<string>();
  let execs = 0,
    clientExecs = 0,
    slowest = 0;

  const runOne = async (input: Buffer): Promise<string> => {
    current = input;
    const t0 = performance.now();
    const { decoded, decodedOk, signature } = checkInProcess(input);
    let sig = signature + ' ' + (await throughServer(rig, input, decoded));
    // The client path costs a round trip, or a 100 ms timeout when the client drops the
    // reply as malformed (its decoding also ran in process above): one decodable input in 16.
    if (decodedOk && (replay || rand(16) === 0)) {
      sig += ' ' + (await throughClient(rig, input));
      clientExecs++;
    }
    const ms = performance.now() - t0;
    slowest = Math.max(slowest, ms);
    if (ms > 2_000 + 100) throw new FuzzFailure(`one input took ${ms.toFixed(0)} ms`);
    execs++;
    return sig;
  };

  const started = Date.now();
  const rss0 = process.memoryUsage().rss;
  try {
    for (const input of corpus) signatures.add(await runOne(input));
    if (replay) {
      console.log(`control_decode: replayed ${corpus.length} input(s), no failure`);
    } else {
      const deadline = started + seconds * 1000;
      let lastReport = started;
      while (Date.now() < deadline) {
        const base = pick(corpus);
        const input = (rand(2) === 0 ? mutateStructure(base) : undefined) ?? mutateBytes(base, corpus);
        const sig = await runOne(input);
        if (!signatures.has(sig)) {
          signatures.add(sig);
          if (corpus.length < 4096) corpus.push(input);
        }
        if (Date.now() - lastReport > 10_000) {
          lastReport = Date.now();
          console.log(
            `control_decode: ${execs} execs, ${Math.round(execs / ((lastReport - started) / 1000))}/s, corpus ${corpus.length}, outcomes ${signatures.size}`,
          );
        }
      }
    }
  } catch (e) {
    if (e instanceof FuzzFailure) fail(e.message);
    fail(`fuzzer error: ${e instanceof Error ? e.stack : String(e)}`);
  }
  const secs = (Date.now() - started) / 1000;
  await rig.close();
  const rss1 = process.memoryUsage().rss;
  console.log(`stat::number_of_executed_units: ${execs}`);
  console.log(`stat::average_exec_per_sec: ${Math.round(execs / Math.max(secs, 0.001))}`);
  console.log(`stat::client_path_units: ${clientExecs}`);
  console.log(`stat::distinct_outcomes: ${signatures.size}`);
  console.log(`stat::corpus_size: ${corpus.length}`);
  console.log(`stat::slowest_input_ms: ${slowest.toFixed(1)}`);
  console.log(`stat::rss_mb: ${(rss0 / 2 ** 20).toFixed(0)} -> ${(rss1 / 2 ** 20).toFixed(0)}`);
  console.log(`control_decode: seed ${seed}, ${secs.toFixed(0)} s, no failure`);
  process.exit(0);
}

await main();
