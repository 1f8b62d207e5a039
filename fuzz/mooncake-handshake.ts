// Mutation fuzzer for mooncake-wire's handshake side (libFuzzer cannot run JavaScript): every
// input goes through
//   1. the parsers in process: the frame reader (fed in random chunks), then the JSON reader
//      with 64-bit integers and the segment descriptor check on the frame's body;
//   2. a real handshake server (the one a listening mooncake-wire transport runs), sent over a
//      socket; then a canary Probe that must be answered (the server is alive and serving);
//   3. a real handshake client whose hostile server answers a Metadata request with the input:
//      the request must settle, with a reply or a TransferError.
// Failures: anything thrown that is not a TransferError, Object.prototype polluted, an
// unhandled rejection, the canary unanswered, a client request never settling. A failing input
// is written to fuzz/crashes/mooncake_handshake-<sha1> and the run exits 1.
//   node --import tsx fuzz/mooncake-handshake.ts [seconds=60] [seed]
import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isTransferError } from '@te/connector';
import {
  FrameReader,
  HandshakeServer,
  MSG_CONNECTION,
  MSG_LEGACY,
  MSG_METADATA,
  MSG_NOTIFY,
  MSG_PROBE,
  encodeFrame,
  encodeSegment,
  handshake,
  parseJson64,
  parseSegment,
} from '../plugins/mooncake-wire/src/index.js';

const here = dirname(fileURLToPath(import.meta.url));
const seconds = Number(process.argv[2] ?? 60);
let state = BigInt(process.argv[3] ?? Date.now()) || 1n;
console.log(`  seed ${state}`);
function rand(n: number): number {
  state ^= (state << 13n) & 0xffffffffffffffffn;
  state ^= state >> 7n;
  state ^= (state << 17n) & 0xffffffffffffffffn;
  return Number(state % BigInt(n));
}

const descriptor = encodeSegment({
  name: '127.0.0.1:15000',
  tcpDataPort: 15001,
  buffers: [
    { addr: 0x7f0000001000n, length: 1n << 20n },
    { addr: 0x7f0000200000n, length: 4096n },
  ],
});
const seeds = [
  encodeFrame(MSG_METADATA, '{}\n'),
  encodeFrame(MSG_PROBE, '{}\n'),
  encodeFrame(MSG_NOTIFY, '{"name":"127.0.0.1:1","notify_msg":"done"}\n'),
  encodeFrame(MSG_CONNECTION, '{"local_nic_path":"","qp_num":[1,2]}\n'),
  encodeFrame(MSG_LEGACY, '{"local_nic_path":"x"}'),
  encodeFrame(MSG_METADATA, descriptor),
];

function mutate(b: Buffer): Buffer {
  let out = Buffer.from(b);
  for (let k = 1 + rand(4); k > 0; k--) {
    const at = out.length ? rand(out.length) : 0;
    switch (rand(7)) {
      case 0:
        out[at] = rand(256);
        break;
      case 1:
        out = Buffer.concat([out.subarray(0, at), Buffer.from([rand(256)]), out.subarray(at)]);
        break;
      case 2:
        out = Buffer.concat([out.subarray(0, at), out.subarray(at + 1 + rand(8))]);
        break;
      case 3:
        out = out.subarray(0, rand(out.length + 1));
        break;
      case 4:
        if (out.length >= 8)
          out.writeBigUInt64LE(BigInt(rand(2)) ? BigInt(Math.max(0, out.length - 8 + rand(3) - 1)) : BigInt(rand(1 << 30)) * BigInt(rand(1 << 20)), 0);
        break;
      case 5: {
        const d = String.fromCharCode(...'0123456789{}[]",:-.e'.split('').map((c) => c.charCodeAt(0)));
        out = Buffer.concat([out.subarray(0, at), Buffer.from(d[rand(d.length)]!), out.subarray(at)]);
        break;
      }
      default:
        out = Buffer.concat([out, out.subarray(rand(out.length + 1))]);
        break;
    }
  }
  return out.subarray(0, 1 << 16);
}

class Failure extends Error {}
const expectTyped = (e: unknown, where: string): void => {
  if (!isTransferError(e)) throw new Failure(`${where} threw a non-TransferError: ${String(e)}`);
};

function inProcess(input: Buffer): void {
  const reader = new FrameReader(1 << 20);
  let frame;
  try {
    for (let i = 0; i < input.length;) {
      const n = 1 + rand(input.length - i);
      frame = reader.push(input.subarray(i, i + n)) ?? frame;
      i += n;
    }
  } catch (e) {
    return expectTyped(e, 'FrameReader');
  }
  if (!frame) return;
  try {
    parseJson64(frame.json);
  } catch (e) {
    expectTyped(e, 'parseJson64');
  }
  try {
    parseSegment(frame.json, 'fuzz');
  } catch (e) {
    expectTyped(e, 'parseSegment');
  }
}

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Failure(`${what} did not settle within ${ms} ms`)), ms))]);
}

async function main(): Promise<void> {
  let unhandled: unknown;
  process.on('unhandledRejection', (e) => (unhandled = e));
  const server = await HandshakeServer.listen(
    { host: '127.0.0.1', port: 0, maxConnections: 64, timeoutMs: 500 },
    { metadata: () => descriptor, notify: () => true },
  );
  let hostileReply: Buffer = Buffer.alloc(0);
  const hostile = createServer((s) => {
    s.on('error', () => undefined);
    s.once('data', () => s.end(hostileReply));
  });
  await new Promise<void>((r) => hostile.listen(0, '127.0.0.1', r));
  const hostilePort = (hostile.address() as { port: number }).port;
  const end = Date.now() + seconds * 1000;
  let runs = 0;
  let input = seeds[0]!;
  try {
    while (Date.now() < end) {
      input = mutate(seeds[rand(seeds.length)]!);
      inProcess(input);
      await within(
        new Promise<void>((resolve) => {
          const s = createConnection({ host: '127.0.0.1', port: server.port }, () => s.end(input));
          s.on('error', () => resolve());
          s.on('close', () => resolve());
          s.resume();
        }),
        2000,
        'the handshake server closing a fuzzed connection',
      );
      if (runs % 8 === 0) {
        const probe = await within(handshake('127.0.0.1', server.port, MSG_PROBE, '{}\n', 2000), 3000, 'the canary Probe');
        if (probe !== '{"status":"success"}\n') throw new Failure(`canary Probe answered ${JSON.stringify(probe)}`);
      }
      hostileReply = input;
      await within(
        handshake('127.0.0.1', hostilePort, MSG_METADATA, '{}\n', 500).then(
          () => undefined,
          (e: unknown) => expectTyped(e, 'handshake client'),
        ),
        2000,
        'the handshake client',
      );
      if (({} as Record<string, unknown>).polluted !== undefined || Object.keys(Object.prototype).length) throw new Failure('Object.prototype polluted');
      if (unhandled) throw new Failure(`unhandled rejection: ${String(unhandled)}`);
      runs++;
    }
  } catch (e) {
    const dir = join(here, 'crashes');
    mkdirSync(dir, { recursive: true });
    const file = join(dir, `mooncake_handshake-${createHash('sha1').update(input).digest('hex')}`);
    writeFileSync(file, input);
    console.error(`fuzz: mooncake_handshake FAILED after ${runs} runs: ${(e as Error).message}; input in ${file}`);
    process.exit(1);
  } finally {
    await server.close();
    hostile.close();
  }
  console.log(`  stat::number_of_executed_units: ${runs}`);
}

await main();
