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
import { mutateBytes, mutateStructure, pick, rand, seedRandom } from './control-mutators.js';

const here = dirname(fileURLToPath(import.meta.url));
const corpusDir = join(here, 'corpus', 'control_plane');
const crashDir = join(here, 'crashes');
const CANARY_TIMEOUT_MS = 2_000;

class FuzzFailure extends Error {}

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
    // the codec must still fail as a TransferError BAD_FRAME, not as some other throw.
    if (!isTypedError(e) || (e as TransferError).code !== 'BAD_FRAME')
      throw new FuzzFailure(`codec threw ${e instanceof Error ? `${e.constructor.name}: ${e.message}` : String(e)} (not a BAD_FRAME TransferError)`);
    const cause = (e as TransferError).cause;
    return { decoded: undefined, decodedOk: false, signature: `codec:${cause instanceof Error ? cause.constructor.name : typeof cause}` };
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

/** One fuzzing run: the rig, the corpus and what the run has seen so far. */
interface Run {
  rig: Rig;
  corpus: Buffer[];
  signatures: Set<string>;
  /** Replaying given inputs: each also goes through the client. */
  replay: boolean;
  /** The input being run (saved when it fails). */
  current: Buffer;
  execs: number;
  clientExecs: number;
  slowest: number;
}

function parseArgs(): { replay: string[] | undefined; seconds: number; seed: bigint } {
  const args = process.argv.slice(2);
  const replay = args[0] === '--replay' ? args.slice(1) : undefined;
  const seconds = replay ? 0 : Number(args[0] ?? process.env.TE_FUZZ_SECONDS ?? 60);
  // `--replay <file>...` takes no seed: its second argument is a file.
  return { replay, seconds, seed: BigInt((replay ? undefined : args[1]) ?? Date.now()) };
}

async function main(): Promise<void> {
  const { replay, seconds, seed } = parseArgs();
  seedRandom(seed);
  if (!replay) console.log(`control_decode: ${seconds} s, seed ${seed} (rerun with: node --import tsx fuzz/control-decode.ts ${seconds} ${seed})`);

  // The run, once the rig is up: a failure before it has no input to save.
  const failing: { run?: Run } = {};
  const fail = (why: string): never => {
    save(failing.run?.current ?? Buffer.alloc(0), why);
    process.exit(1);
  };
  process.on('unhandledRejection', (e) => fail(`unhandled rejection: ${e instanceof Error ? e.stack : String(e)}`));
  process.on('uncaughtException', (e) => fail(`uncaught exception: ${e.stack}`));

  const corpus = (replay ?? readdirSync(corpusDir).map((f) => join(corpusDir, f))).map((f) => readFileSync(f));
  const run: Run = {
    rig: await startRig(),
    corpus,
    signatures: new Set(),
    replay: replay !== undefined,
    current: Buffer.alloc(0),
    execs: 0,
    clientExecs: 0,
    slowest: 0,
  };
  failing.run = run;

  const started = Date.now();
  const rss0 = process.memoryUsage().rss;
  try {
    for (const input of corpus) run.signatures.add(await runOne(run, input));
    if (replay) console.log(`control_decode: replayed ${corpus.length} input(s), no failure`);
    else await mutateUntil(run, started, started + seconds * 1000);
  } catch (e) {
    if (e instanceof FuzzFailure) fail(e.message);
    fail(`fuzzer error: ${e instanceof Error ? e.stack : String(e)}`);
  }
  const secs = (Date.now() - started) / 1000;
  await run.rig.close();
  printStats(run, secs, rss0);
  console.log(`control_decode: seed ${seed}, ${secs.toFixed(0)} s, no failure`);
  process.exit(0);
}

/** Every stage on one input; its outcome signature. Throws FuzzFailure. */
async function runOne(run: Run, input: Buffer): Promise<string> {
  run.current = input;
  const t0 = performance.now();
  const { decoded, decodedOk, signature } = checkInProcess(input);
  let sig = signature + ' ' + (await throughServer(run.rig, input, decoded));
  // The client path costs a round trip, or a 100 ms timeout when the client drops the
  // reply as malformed (its decoding also ran in process above): one decodable input in 16.
  if (decodedOk && (run.replay || rand(16) === 0)) {
    sig += ' ' + (await throughClient(run.rig, input));
    run.clientExecs++;
  }
  const ms = performance.now() - t0;
  run.slowest = Math.max(run.slowest, ms);
  if (ms > 2_000 + 100) throw new FuzzFailure(`one input took ${ms.toFixed(0)} ms`);
  run.execs++;
  return sig;
}

/** Mutated inputs until `deadline`; one with a new outcome joins the corpus. A line of progress every 10 s. */
async function mutateUntil(run: Run, started: number, deadline: number): Promise<void> {
  const { corpus, signatures } = run;
  let lastReport = started;
  while (Date.now() < deadline) {
    const base = pick(corpus);
    const input = (rand(2) === 0 ? mutateStructure(base) : undefined) ?? mutateBytes(base, corpus);
    const sig = await runOne(run, input);
    if (!signatures.has(sig)) {
      signatures.add(sig);
      if (corpus.length < 4096) corpus.push(input);
    }
    if (Date.now() - lastReport > 10_000) {
      lastReport = Date.now();
      console.log(
        `control_decode: ${run.execs} execs, ${Math.round(run.execs / ((lastReport - started) / 1000))}/s, corpus ${corpus.length}, outcomes ${signatures.size}`,
      );
    }
  }
}

function printStats(run: Run, secs: number, rss0: number): void {
  const rss1 = process.memoryUsage().rss;
  console.log(`stat::number_of_executed_units: ${run.execs}`);
  console.log(`stat::average_exec_per_sec: ${Math.round(run.execs / Math.max(secs, 0.001))}`);
  console.log(`stat::client_path_units: ${run.clientExecs}`);
  console.log(`stat::distinct_outcomes: ${run.signatures.size}`);
  console.log(`stat::corpus_size: ${run.corpus.length}`);
  console.log(`stat::slowest_input_ms: ${run.slowest.toFixed(1)}`);
  console.log(`stat::rss_mb: ${(rss0 / 2 ** 20).toFixed(0)} -> ${(rss1 / 2 ** 20).toFixed(0)}`);
}

await main();
