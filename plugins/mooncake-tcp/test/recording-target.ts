// A target that speaks the mooncake-tcp wire by hand (native/wire.h), for tests of what the
// real initiator sends: what it announces in HELLO_ACK is chosen by the test.
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { NATIVE_STATUS, type SegmentDescriptor } from '@te/connector';
import { header, HEADER, HELLO_ACK_BODY, OP, SEGMENT_ENTRY } from './wire.js';

export interface Frame {
  op: number;
  /** WRITEV: the segments' target addresses and lengths; WRITE: one. */
  segments: { addr: bigint; length: bigint }[];
  /** Which accepted connection (lane) carried it: 0, 1, … in the order they connected. */
  connection: number;
}

/** A WRITE's answer: refused (ADDRESS_OUT_OF_RANGE) or OK; a verified one's with a wrong digest, or without one. */
function writeAnswer(id: bigint, refused: boolean, digest: 'wrong' | 'none' | undefined): Buffer {
  const h = header(OP.WRITE | OP.RESPONSE, { id });
  h.writeInt32LE(refused ? NATIVE_STATUS.ADDRESS_OUT_OF_RANGE : 0, 8);
  if (digest === 'wrong') {
    h[7] = 1; // kFlagDigest
    h.writeBigUInt64LE(0x1234n, 24);
  }
  return h;
}

interface Answers {
  digest?: 'wrong' | 'none';
  hangUpAt?: (addr: bigint) => boolean;
}

/**
 * A target that speaks mooncake-tcp by hand: it answers HELLO with `features`, records every
 * request frame, and refuses the writes whose address `refuse` names (ADDRESS_OUT_OF_RANGE).
 * A verified WRITE (flags bit 1) is answered with `digest`: a wrong digest, or none at all.
 * A WRITE whose address `hangUpAt` names is not answered: the target ends the connection.
 */
export async function recordingTarget(features: number, refuse: (addr: bigint) => boolean, answers: Answers = {}) {
  const frames: Frame[] = [];
  const epoch = randomBytes(8).readBigUInt64LE() | 1n;
  const sockets = new Set<Socket>();
  let connections = 0;
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    const connection = connections++;
    socket.on('close', () => sockets.delete(socket));
    let buf = Buffer.alloc(0);
    let helloDone = false;
    socket.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        if (buf.length < HEADER) return;
        const length = Number(buf.readBigUInt64LE(32));
        const op = buf[6]!;
        const flags = buf[7]!;
        const bodyLen = op === OP.READ ? 0 : length;
        if (buf.length < HEADER + bodyLen) return;
        const id = buf.readBigUInt64LE(16);
        const addr = buf.readBigUInt64LE(24);
        const body = buf.subarray(HEADER, HEADER + bodyLen);
        buf = buf.subarray(HEADER + bodyLen);
        if (!helloDone) {
          helloDone = true;
          const ack = header(OP.HELLO | OP.RESPONSE, { id, addr: epoch, length: BigInt(HELLO_ACK_BODY) });
          const ackBody = Buffer.alloc(HELLO_ACK_BODY);
          ackBody[17] = features;
          socket.write(Buffer.concat([ack, ackBody]));
          continue;
        }
        if (op === OP.WRITE) {
          frames.push({ op, segments: [{ addr, length: BigInt(length) }], connection });
          if (answers.hangUpAt?.(addr)) return void socket.end(); // earlier answers still arrive, then the end
          socket.write(writeAnswer(id, refuse(addr), (flags & 1) !== 0 ? answers.digest : undefined));
        } else if (op === OP.WRITEV) {
          const n = Number(addr);
          const segments = Array.from({ length: n }, (_, i) => ({
            addr: body.readBigUInt64LE(i * SEGMENT_ENTRY),
            length: body.readBigUInt64LE(i * SEGMENT_ENTRY + 8),
          }));
          frames.push({ op, segments, connection });
          const statuses = segments.map((s) => (refuse(s.addr) ? NATIVE_STATUS.ADDRESS_OUT_OF_RANGE : 0));
          const first = statuses.find((s) => s !== 0) ?? 0;
          const h = header(OP.WRITEV | OP.RESPONSE, { id, length: first ? BigInt(4 * n) : 0n });
          h.writeInt32LE(first, 8);
          const list = Buffer.alloc(first ? 4 * n : 0);
          statuses.forEach((s, i) => first && list.writeInt32LE(s, 4 * i));
          socket.write(Buffer.concat([h, list]));
        } else {
          socket.destroy();
          return;
        }
      }
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  const descriptor: SegmentDescriptor = {
    version: 1,
    name: `recording-${port}`,
    epoch,
    hostname: 'test',
    pid: 0,
    transports: { 'mooncake-tcp': { class: 'tcp', memoryKinds: ['cpu'], endpoint: { host: '127.0.0.1', port, protocol: 1 } } },
    buffers: [{ addr: 1n << 40n, length: 1n << 30n, device: 'cpu', attrs: {} }],
  };
  return {
    frames,
    descriptor,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}
