// Segment descriptors in a real etcd (Debian's etcd-server on loopback): engines over
// mooncake-tcp find each other through it; a killed process's descriptor leaves with its
// lease; an etcd outage does not stop transfers between known peers and is survived
// without restarting anything, also when etcd comes back without its data; a peer
// restarted at the same address is never written through its old descriptor. Peers whose
// death matters run in their own processes.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { createServer } from 'node:net';
import { randomBytes } from 'node:crypto';
import { createTransferEngine, isTransferError, loadConfig, type TransferEngine } from '@te/connector';
import { EtcdServer, NO_ETCD } from './fixtures/etcd.js';

const PEER = new URL('./fixtures/etcd-peer.ts', import.meta.url).pathname;
const TTL_S = 2;

interface Peer {
  child: ChildProcess;
  segment: string;
  addr: bigint;
  epoch: bigint;
}

function startPeer(endpoint: string, prefix: string, fill: number, port = 0): Promise<Peer> {
  const child = spawn(process.execPath, ['--import', 'tsx', PEER, endpoint, prefix, String(fill), String(port)], { stdio: ['pipe', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('peer process did not start within 20 s')), 20_000);
    child.on('exit', (code) => reject(new Error(`peer process exited (${code}) before it was ready`)));
    createInterface({ input: child.stdout! }).once('line', (line) => {
      clearTimeout(timer);
      const j = JSON.parse(line) as { segment: string; addr: string; epoch: string };
      resolve({ child, segment: j.segment, addr: BigInt(j.addr), epoch: BigInt(j.epoch) });
    });
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

async function until(what: string, check: () => Promise<boolean> | boolean, ms: number): Promise<number> {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    if (await check()) return Date.now() - t0;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what}: not within ${ms} ms`);
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'OK';
  } catch (e) {
    assert.ok(isTransferError(e), `not a TransferError: ${e}`);
    return (e as { code: string }).code;
  }
}

/** Reads `length` bytes of `segment` at `remote` into a fresh buffer of `engine`. */
async function readFrom(engine: TransferEngine, segment: string, remote: bigint, length: number): Promise<Buffer> {
  const local = Buffer.alloc(length);
  const h = await engine.registerMemory(local, { remoteAccess: false });
  try {
    await engine.read(segment, h.addr, remote, length, { timeoutMs: 5000 });
    return Buffer.from(local);
  } finally {
    await engine.unregisterMemory(h.addr);
  }
}

const engineConfig = (endpoint: string, prefix: string) => ({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1', metadata: { type: 'etcd' as const, endpoints: [endpoint], prefix, leaseTtlS: TTL_S }, timeouts: { handshakeMs: 3000 } });

if (NO_ETCD) {
  test.skip(`etcd metadata — skipped: ${NO_ETCD}`, () => undefined);
} else {
  let etcd: EtcdServer;
  const children: ChildProcess[] = [];
  const engines: TransferEngine[] = [];
  test.before(async () => {
    etcd = await EtcdServer.create();
  });
  test.after(async () => {
    for (const c of children) c.kill('SIGKILL');
    await Promise.allSettled(engines.map((e) => e.close()));
    etcd?.dispose();
  });
  const engine = async (prefix: string): Promise<TransferEngine> => {
    const e = await createTransferEngine(engineConfig(etcd.endpoint, prefix));
    engines.push(e);
    return e;
  };
  const peer = async (prefix: string, fill: number, port = 0): Promise<Peer> => {
    const p = await startPeer(etcd.endpoint, prefix, fill, port);
    children.push(p.child);
    return p;
  };

  test('the metadata setting: connection strings, Mooncake\'s spelling, the environment', () => {
    const c = loadConfig({ env: {}, json: { connector: 'mooncake-tcp', metadata_server: 'etcd://10.0.0.5:2379,10.0.0.6' } });
    assert.equal(c.metadata.type, 'etcd');
    assert.equal(c.metadata.endpoints, ['10.0.0.5:2379', '10.0.0.6:2379']);
    assert.is(loadConfig({ env: { TE_CONNECTOR: 'mooncake-tcp', MC_METADATA_SERVER: 'P2PHANDSHAKE' } }).metadata.type, 'p2p');
    const e = loadConfig({ env: { TE_CONNECTOR: 'mooncake-tcp', TE_METADATA: 'etcd://h:2379', TE_METADATA_PREFIX: 'cluster-a', TE_HANDSHAKE_PORT: '17000' } }).metadata;
    assert.equal([e.type, e.endpoints, e.prefix, e.port], ['etcd', ['h:2379'], 'cluster-a', 17000]);
    for (const bad of ['etcd://', 'etcd://h:99999', 'zookeeper://h:2181', 'etcd://a b:1']) {
      try {
        loadConfig({ env: {}, json: { connector: 'mooncake-tcp', metadata: bad } });
        assert.unreachable(bad);
      } catch (err) {
        assert.is((err as { code?: string }).code, 'INVALID_CONFIG', bad);
      }
    }
  });

  test('etcd unreachable at start: PEER_UNREACHABLE naming the endpoint, within the deadline', async () => {
    const port = await freePort();
    const t0 = Date.now();
    try {
      await createTransferEngine({ connector: 'mooncake-tcp', metadata: `etcd://127.0.0.1:${port}`, timeouts: { handshakeMs: 1500 } });
      assert.unreachable('engine created without etcd');
    } catch (err) {
      assert.ok(isTransferError(err), String(err));
      assert.is((err as { code: string }).code, 'PEER_UNREACHABLE');
      assert.match((err as Error).message, `127.0.0.1:${port}`);
    }
    assert.ok(Date.now() - t0 < 5000, `${Date.now() - t0} ms`);
  });

  test('engines in two processes find each other through etcd and move bytes both ways', async () => {
    const prefix = `t-${randomBytes(4).toString('hex')}`;
    const b = await peer(prefix, 0x5a);
    const a = await engine(prefix);
    assert.ok((await etcd.keys(`${prefix}/segments/`)).includes(`${prefix}/segments/${b.segment}`));
    const got = await readFrom(a, b.segment, b.addr + 100n, 4096);
    assert.ok(got.every((x) => x === 0x5a), 'bytes read from the peer');
    const src = randomBytes(8192);
    const h = await a.registerMemory(src, { remoteAccess: false });
    await a.write(b.segment, h.addr, b.addr, src.length, { timeoutMs: 5000 });
    assert.ok((await readFrom(a, b.segment, b.addr, src.length)).equals(src), 'bytes written landed');
  });

  test('a killed process: its descriptor leaves etcd within the lease TTL, and transfers to it fail typed', async () => {
    const prefix = `t-${randomBytes(4).toString('hex')}`;
    const b = await peer(prefix, 1);
    const a = await engine(prefix);
    await readFrom(a, b.segment, b.addr, 64);
    b.child.kill('SIGKILL');
    const gone = await until('descriptor removed', async () => !(await etcd.keys(`${prefix}/segments/`)).includes(`${prefix}/segments/${b.segment}`), (TTL_S + 4) * 1000);
    console.log(`  descriptor of the killed process gone from etcd after ${gone} ms (lease TTL ${TTL_S} s)`);
    // A process that knew it: a connection-level error. One that never did: PEER_NOT_FOUND.
    const known = await codeOf(readFrom(a, b.segment, b.addr, 64));
    assert.ok(['CONNECTION_LOST', 'PEER_UNREACHABLE', 'PEER_NOT_FOUND', 'PEER_FAILED'].includes(known), known);
    const fresh = await engine(prefix);
    assert.is(await codeOf(readFrom(fresh, b.segment, b.addr, 64)), 'PEER_NOT_FOUND');
  });

  test('etcd stopped: known peers keep transferring, new lookups fail typed; restarted: lookups work again without restarts', async () => {
    const prefix = `t-${randomBytes(4).toString('hex')}`;
    const b = await peer(prefix, 7);
    const c = await peer(prefix, 9);
    const a = await engine(prefix);
    await readFrom(a, b.segment, b.addr, 64);
    await etcd.stop();
    try {
      const during = await readFrom(a, b.segment, b.addr, 65536);
      assert.ok(during.every((x) => x === 7), 'a known peer is still served while etcd is down');
      const t0 = Date.now();
      assert.is(await codeOf(readFrom(a, c.segment, c.addr, 64)), 'PEER_UNREACHABLE');
      assert.ok(Date.now() - t0 < 4500, `lookup failed after ${Date.now() - t0} ms`);
    } finally {
      await etcd.start();
    }
    const back = await until('lookup after etcd restart', async () => (await codeOf(readFrom(a, c.segment, c.addr, 64))) === 'OK', 15_000);
    console.log(`  new lookups work ${back} ms after etcd restarted`);
    assert.ok((await readFrom(a, c.segment, c.addr, 4096)).every((x) => x === 9));
  });

  test('etcd restarted without its data: live processes write their descriptors again', async () => {
    const prefix = `t-${randomBytes(4).toString('hex')}`;
    const b = await peer(prefix, 3);
    const a = await engine(prefix);
    await etcd.stop();
    await etcd.start({ wipe: true });
    const back = await until('descriptors written again', async () => (await etcd.keys(`${prefix}/segments/`)).length === 2, (TTL_S + 10) * 1000);
    console.log(`  both descriptors back in etcd ${back} ms after it restarted empty`);
    const fresh = await engine(prefix);
    assert.ok((await readFrom(fresh, b.segment, b.addr, 4096)).every((x) => x === 3));
    assert.ok((await etcd.keys(`${prefix}/segments/`)).includes(`${prefix}/segments/${a.segmentName}`));
  });

  test('a peer restarted at the same address: its old descriptor is never used (epoch)', async () => {
    const prefix = `t-${randomBytes(4).toString('hex')}`;
    const port = await freePort();
    const old = await peer(prefix, 0x11, port);
    const a = await engine(prefix);
    await readFrom(a, old.segment, old.addr, 64);
    old.child.kill('SIGKILL');
    await until('old descriptor gone', async () => (await etcd.keys(`${prefix}/segments/`)).length === 1, (TTL_S + 4) * 1000);
    const renewed = await peer(prefix, 0x22, port);
    assert.is(renewed.segment, old.segment, 'same control address');
    assert.not.equal(renewed.epoch, old.epoch);
    // Through the new descriptor: the new memory. A write aimed at the old region's address
    // is refused unless that address is registered in the new process too.
    assert.ok((await readFrom(a, renewed.segment, renewed.addr, 4096)).every((x) => x === 0x22));
    if (old.addr !== renewed.addr) assert.is.not(await codeOf(readFrom(a, renewed.segment, old.addr, 64)), 'OK');
  });

}

test.run();
