// The PD bootstrap through the cluster store: with bootstrapStore "etcd", prefill ranks
// register in etcd (under their engine's lease) and decode ranks find them there, so no
// bootstrap HTTP server runs; the same layout rules apply (a page-size mismatch is refused
// naming both values), a room lands byte-exact, and a prefill that is gone is reported
// unhealthy. A real etcd (Debian etcd-server) on loopback; ranks over mooncake-tcp.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createConnection } from 'node:net';
import { randomBytes } from 'node:crypto';
import { KVStatus, createTransferEngine, isTransferError, type KVBuffers, type ParallelLayout, type TransferEngine } from '@te/connector';
import { EtcdRankDirectory, createKVManager } from '../src/index.js';
import { allocateRank, fillPrefill, verifyDecode, type ModelSpec } from './fixtures/pd-model.js';
import { EtcdServer, NO_ETCD } from '../../connector/test/fixtures/etcd.js';
import { freePort } from './pd-harness.js';

const MODEL: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 2, headBytes: 16, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 32 };
const LAYOUT: ParallelLayout = { attnTpSize: 1, attnTpRank: 0, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };
const timeouts = { bootstrapMs: 3000, waitingMs: 3000, heartbeatIntervalMs: 500, heartbeatMaxFailures: 2, abortMs: 1000 };

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host: '127.0.0.1', port }, () => {
      s.destroy();
      resolve(true);
    });
    s.on('error', () => resolve(false));
  });
}

if (NO_ETCD) {
  test.skip(`PD bootstrap through etcd — skipped: ${NO_ETCD}`, () => undefined);
} else {
  let etcd: EtcdServer;
  const engines: TransferEngine[] = [];
  const closers: (() => Promise<void>)[] = [];
  test.before(async () => {
    etcd = await EtcdServer.create();
  });
  test.after(async () => {
    for (const c of closers) await c().catch(() => undefined);
    await Promise.allSettled(engines.map((e) => e.close()));
    etcd?.dispose();
  });
  const engine = async (prefix: string): Promise<TransferEngine> => {
    const e = await createTransferEngine({
      connector: 'mooncake-tcp',
      bindAddress: '127.0.0.1',
      metadata: { type: 'etcd', endpoints: [etcd.endpoint], prefix, leaseTtlS: 2 },
    });
    engines.push(e);
    return e;
  };
  /** A prefill and a decode engine under a fresh key prefix, each with its rank's memory (the decode's of `decodeModel`). */
  const pair = async (decodeModel: ModelSpec = MODEL) => {
    const prefix = `b-${randomBytes(4).toString('hex')}`;
    const pe = await engine(prefix);
    const de = await engine(prefix);
    return { prefix, pe, de, pm: await allocateRank(pe, MODEL, LAYOUT), dm: await allocateRank(de, decodeModel, LAYOUT) };
  };
  /** The prefill rank's KV manager, registered in etcd as the instance at 127.0.0.1:`port`; closed after the suite. */
  const etcdPrefill = async (pe: TransferEngine, pm: { buffers: KVBuffers }, port: number) => {
    const prefill = await createKVManager({
      role: 'prefill',
      engine: pe,
      layout: LAYOUT,
      buffers: pm.buffers,
      bootstrapHost: '127.0.0.1',
      bootstrapPort: port,
      bootstrapStore: 'etcd',
      timeouts,
    });
    closers.push(() => prefill.close());
    return prefill;
  };

  test('prefill ranks registered in etcd are found by the decode; no bootstrap server runs; the room lands byte-exact', async () => {
    const { prefix, pe, de, pm, dm } = await pair();
    const port = await freePort();
    const prefill = await etcdPrefill(pe, pm, port);
    const decode = await createKVManager({ role: 'decode', engine: de, layout: LAYOUT, buffers: dm.buffers, bootstrapStore: 'etcd', timeouts });
    closers.push(() => decode.close());
    assert.is(prefill.bootstrapServer, undefined, 'no HTTP bootstrap server with the etcd store');
    assert.not.ok(await listening(port), 'nothing listens on the bootstrap port');
    assert.ok((await etcd.keys(`${prefix}/records/pd/`)).includes(`${prefix}/records/pd/127.0.0.1:${port}/0/0/0`));
    const room = 777n;
    const pages = Uint32Array.from([2, 7, 5]);
    fillPrefill(MODEL, pm, room, pages, 1);
    const receiver = decode.createReceiver({ host: '127.0.0.1', port, room });
    const sender = prefill.createSender({ host: '127.0.0.1', port, room });
    await receiver.init(pages, 1);
    sender.init(pages.length, 1);
    await sender.send(pages, { last: true });
    await receiver.cell.reached(KVStatus.Success);
    assert.is(verifyDecode(MODEL, dm, [{ room, pages, auxSlot: 1 }]), undefined);
  });

  test('the same layout rules: a decode with another page size is refused naming both values', async () => {
    // 6 tokens: not a whole number of the prefill's 4-token pages (a multiple would be accepted).
    const { pe, de, pm, dm } = await pair({ ...MODEL, pageSize: 6 });
    const port = await freePort();
    const prefill = await etcdPrefill(pe, pm, port);
    const directory = new EtcdRankDirectory(`127.0.0.1:${port}`, de.metadataRecords!);
    try {
      await directory.prefillInfo(
        { page_size: dm.buffers.pageSize, kv_cache_dtype: dm.buffers.kvCacheDtype, attention: dm.buffers.attention, num_layers: MODEL.totalLayers },
        2000,
      );
      assert.unreachable('mismatch accepted');
    } catch (e) {
      assert.ok(isTransferError(e));
      assert.is((e as { code: string }).code, 'LAYOUT_MISMATCH');
      assert.match((e as Error).message, 'decode has page_size=6, prefill has page_size=4');
    }
    assert.ok(await directory.health(1000), 'the instance is alive');
    await prefill.close();
    await pe.close();
    const gone = Date.now();
    while (Date.now() - gone < 6000 && (await directory.health(1000))) await new Promise((r) => setTimeout(r, 100));
    assert.not.ok(await directory.health(1000), 'a closed prefill instance is no longer healthy');
  });

  // Before, a rank whose own record was not JSON got a SyntaxError from ensureRegistered.
  test("a rank's record that is not JSON: ensureRegistered fails with BAD_FRAME naming the record", async () => {
    const { prefix, de } = await pair();
    const port = await freePort();
    const key = `pd/127.0.0.1:${port}/0/0/0`;
    await etcd.put(`${prefix}/records/${key}`, Buffer.from('{not json'));
    const directory = new EtcdRankDirectory(`127.0.0.1:${port}`, de.metadataRecords!);
    const registration = {
      ...{ attn_tp_size: 1, attn_tp_rank: 0, attn_dp_size: 1, attn_dp_rank: 0, pp_size: 1, pp_rank: 0, system_dp_size: 1, system_dp_rank: 0 },
      ...{ endpoint: '127.0.0.1:7000', page_size: 4, kv_cache_dtype: 'bf16', attention: 'mha' as const, num_layers: 2, first_layer: 0, stage_layers: 2 },
    };
    const e = await directory.ensureRegistered(registration, 2000).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(e), String(e));
    assert.is(e.code, 'BAD_FRAME');
    assert.match(e.message, `record ${key} of prefill instance 127.0.0.1:${port} is not JSON`);
  });

  test('bootstrapStore "etcd" without etcd metadata is refused with the reason', async () => {
    const e = await createTransferEngine({ connector: 'mooncake-tcp' });
    engines.push(e);
    const m = await allocateRank(e, MODEL, LAYOUT);
    try {
      await createKVManager({ role: 'decode', engine: e, layout: LAYOUT, buffers: m.buffers, bootstrapStore: 'etcd', timeouts });
      assert.unreachable('accepted');
    } catch (err) {
      assert.is((err as { code?: string }).code, 'INVALID_CONFIG');
      assert.match((err as Error).message, 'metadata is not etcd');
    }
    for (const bad of ['zookeeper', '', 42]) {
      try {
        await createKVManager({ role: 'decode', engine: e, layout: LAYOUT, buffers: m.buffers, bootstrapStore: bad as 'etcd', timeouts });
        assert.unreachable(`accepted ${JSON.stringify(bad)}`);
      } catch (err) {
        assert.is((err as { code?: string }).code, 'INVALID_CONFIG', String(bad));
        assert.match((err as Error).message, 'bootstrapStore');
      }
    }
  });
}

test.run();
