import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer } from 'node:net';
import { createTransferEngine, isTransferError, type KVBuffers, type ParallelLayout } from '@te/connector';
import { createKVManager } from '@te/disagg';
import { freePort } from '@te/testkit';
import { probeCuda, addonLoader, type NativeCudaModule } from '@te/cuda';
import { join } from 'node:path';

/*
 * The runtime with its KV in CUDA memory, on a machine without a GPU: a KV manager given
 * `device: 'cuda:0'` buffers fails with the transport's NO_DEVICE (its reason named),
 * whichever CUDA transport the KV is routed to, and leaves nothing registered and no
 * bootstrap port bound. (The EC device pool's no-device path is checked in
 * packages/disagg/test/ec-connector.test.ts; with a GPU, test/gpu/run.sh runs the runtime
 * on device memory.)
 */
const load = addonLoader<NativeCudaModule>({
  plugin: 'mooncake-intra-nvlink',
  pkg: '@te/mooncake-intra-nvlink',
  addon: 'te_mooncake_intra_nvlink.node',
  envVar: 'TE_MOONCAKE_INTRA_NVLINK_ADDON',
  root: join(import.meta.dirname, '..', 'plugins', 'mooncake-intra-nvlink'),
});
const gpu = probeCuda(load).available;
const layout: ParallelLayout = { attnTpSize: 1, attnTpRank: 0, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };

function buffers(auxAddr: bigint): KVBuffers {
  // Device addresses as a framework would pass them (never dereferenced: registration fails first).
  const kv = 0x7f0000000000n;
  return {
    kv: { addrs: BigUint64Array.of(kv, kv + 0x10000n), lengths: BigUint64Array.of(0x10000n, 0x10000n), itemLengths: BigUint64Array.of(1024n, 1024n) },
    aux: { addrs: BigUint64Array.of(auxAddr), lengths: BigUint64Array.of(256n), itemLengths: BigUint64Array.of(64n) },
    attention: 'mha',
    numLayers: 1,
    pageSize: 4,
    kvCacheDtype: 'bf16',
    device: 'cuda:0',
  };
}

const portFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });

for (const [connector, transports] of [
  ['mooncake-intra-nvlink', ['mooncake-tcp']],
  ['mooncake-tcp', []],
] as const) {
  const name = `KV in cuda:0 over ${[connector, ...transports].join(' + ')} without a GPU: NO_DEVICE with its reason, nothing registered, no port bound`;
  if (gpu) {
    console.log(`  skipped "${name}": a GPU is present (test/gpu/run.sh runs the runtime on it)`);
    test.skip(name, () => undefined);
    continue;
  }
  test(name, async () => {
    const engine = await createTransferEngine({ connector, transports: [...transports], bindAddress: '127.0.0.1' }, { env: {} });
    const aux = Buffer.alloc(256);
    try {
      // Raw host address for aux, unknown to the engine (as a framework passes it).
      const h = await engine.registerMemory(aux);
      await engine.unregisterMemory(h.addr);
      for (const role of ['prefill', 'decode'] as const) {
        const port = await freePort();
        const e = await createKVManager({ role, layout, buffers: buffers(h.addr), engine, bootstrapHost: '127.0.0.1', bootstrapPort: port }).then(
          () => assert.unreachable('KV in cuda:0 registered on a machine without a GPU'),
          (x: unknown) => x,
        );
        assert.ok(isTransferError(e, 'NO_DEVICE'), String(e));
        assert.match((e as Error).message, /no CUDA device: .+/);
        assert.equal(engine.registeredMemory(), [], `${role}: memory left registered`);
        assert.ok(await portFree(port), `${role}: bootstrap port ${port} left bound`);
      }
    } finally {
      aux.fill(0);
      await engine.close();
    }
  });
}

test.run();
