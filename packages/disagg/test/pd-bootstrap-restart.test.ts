import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KVStatus, createTransferEngine, type ParallelLayout, type TransferEngine } from '@te/connector';
import { BootstrapServer, createKVManager, type DisaggKVManager } from '../src/index.js';
import { allocateRank, fillPrefill, verifyDecode, type ModelSpec } from './fixtures/pd-model.js';
import { freePort, layout, TCP_CONFIG } from './pd-harness.js';
import { FAST } from './pd-scenario.js';

/*
 * A prefill instance's bootstrap server restarted (its process died, or the rank hosting
 * it) comes back with an empty rank table. The prefill ranks that are still alive must
 * register with it again on their own: otherwise the instance is never ready again and
 * every later room to it ends at its bootstrap timeout. Ranks run in this process, each
 * with its own mooncake-tcp engine; the server is started apart from them.
 */
const MODEL: ModelSpec = { attention: 'mha', totalLayers: 2, heads: 4, headBytes: 16, pageSize: 4, pages: 16, auxSlots: 4, auxBytes: 32 };

test('the bootstrap server restarted on its port: the live prefill ranks register again and a decode that asks after it is served', async () => {
  const port = await freePort();
  let server = await BootstrapServer.start({ host: '127.0.0.1', port });
  const made: { engine: TransferEngine; manager: DisaggKVManager; memory: Awaited<ReturnType<typeof allocateRank>> }[] = [];
  const make = async (role: 'prefill' | 'decode', l: ParallelLayout) => {
    const engine = await createTransferEngine(TCP_CONFIG);
    const memory = await allocateRank(engine, MODEL, l);
    const manager = await createKVManager({
      role,
      layout: l,
      buffers: memory.buffers,
      engine,
      bootstrapHost: '127.0.0.1',
      bootstrapPort: port,
      serveBootstrap: false,
      timeouts: { ...FAST, bootstrapMs: 8_000 },
    });
    const r = { engine, manager, memory };
    made.push(r);
    return r;
  };
  try {
    const prefills = [await make('prefill', layout(2, 0)), await make('prefill', layout(2, 1))];
    const room = async (decode: Awaited<ReturnType<typeof make>>, id: bigint, src: number[], dst: number[]) => {
      const pages = Uint32Array.from(src);
      const senders = prefills.map((p) => {
        fillPrefill(MODEL, p.memory, id, pages, 1);
        const s = p.manager.createSender({ host: '127.0.0.1', port, room: id });
        s.init(pages.length, 1);
        return s;
      });
      const receiver = decode.manager.createReceiver({ host: '127.0.0.1', port, room: id });
      const started = Date.now();
      await receiver.init(Uint32Array.from(dst), 2);
      await Promise.all(senders.map((s) => s.send(pages, { last: true })));
      await receiver.cell.reached(KVStatus.Success, { timeoutMs: 5_000 });
      return Date.now() - started;
    };
    const d1 = await make('decode', layout(1, 0));
    await room(d1, 81n, [0, 1], [4, 5]);
    await server.close();
    server = await BootstrapServer.start({ host: '127.0.0.1', port });
    // A decode that first asks now: the new server knows only the ranks that registered again.
    const d2 = await make('decode', layout(1, 0));
    // (The error is flattened to text: uvu cannot print one whose details hold a bigint.)
    const ms = await room(d2, 82n, [2, 3], [6, 7]).catch((e: Error) => assert.unreachable(`not served: ${e.message}`) as never);
    assert.ok(ms < 5_000, `served after ${ms} ms`);
    assert.is(verifyDecode(MODEL, d2.memory, [{ room: 82n, pages: Uint32Array.of(6, 7), auxSlot: 2 }]), undefined);
  } finally {
    for (const r of made) await r.manager.close();
    for (const r of made) await r.engine.close();
    await server.close();
  }
});

test.run();
