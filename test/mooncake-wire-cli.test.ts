// `te bench --wire mooncake` end to end, as separate processes: te measuring te's own
// Mooncake-compatible target (--loopback, everywhere), te measuring the real Mooncake target,
// and the real Mooncake initiator writing into `te bench --mode target --wire mooncake`.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { ControlClient, batchOf } from '@te/connector';
import { runInitiator, startTarget, unavailable } from '../plugins/mooncake-wire/test/mooncake-bin.js';
import { wire } from '../plugins/mooncake-wire/test/helpers.js';
// @ts-expect-error plain ES module without types (the benchmark's own helper)
import { checkTargetHolds } from '../bench/lib/mooncake-verify.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const te = join(root, 'packages', 'cli', 'bin', 'te.js');

function bench(args: string[]): { status: number | null; result: { verified: boolean; plugin: string; bytes: number; op: string }; stderr: string } {
  const r = spawnSync(process.execPath, [te, 'bench', '--wire', 'mooncake', '--json', ...args], { encoding: 'utf8', timeout: 120_000 });
  const last = r.stdout.trim().split('\n').pop() ?? '';
  let result = { verified: false, plugin: '', bytes: 0, op: '' };
  try {
    result = JSON.parse(last);
  } catch {
    // reported below through status and stderr
  }
  return { status: r.status, result, stderr: r.stderr };
}

test('te bench --loopback --wire mooncake --verify: te into te over the Mooncake wire, every byte checked', () => {
  for (const op of ['write', 'read']) {
    const r = bench(['--loopback', '--op', op, '--block-size', '64k', '--batch-size', '16', '--concurrency', '2', '--duration', '0.5', '--verify']);
    assert.is(r.status, 0, r.stderr);
    assert.is(r.result.plugin, 'mooncake-wire');
    assert.is(r.result.op, op);
    assert.ok(r.result.verified && r.result.bytes > 0);
  }
});

test("the interop bench's verifier fails on one corrupted byte in the te target's range", async () => {
  const child = spawn(process.execPath, [te, 'bench', '--mode', 'target', '--wire', 'mooncake', '--bytes', '1MiB', '--exit-with-parent'], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const control = { close: () => undefined } as { close(): void; request?: unknown };
  try {
    const ready = await new Promise<{ ready: string; segment: string }>((resolve, reject) => {
      createInterface({ input: child.stdout! }).once('line', (l) => resolve(JSON.parse(l)));
      child.once('exit', (c) => reject(new Error(`target exited ${c}`)));
    });
    const c = new ControlClient(ready.segment);
    control.close = () => c.close();
    const init = await wire({});
    try {
      const zeros = new Uint8Array(4096);
      const z = await init.registerMemory({ buffer: zeros, length: 4096n, device: 'cpu', remoteAccess: false });
      const { descriptor, peer } = await init.openSegment(ready.ready);
      const base = descriptor.buffers[0]!.addr;
      await init.submit(peer, batchOf([{ op: 'write', local: z.addr, remote: base, length: 4096 }]), { timeoutMs: 5000 });
      await checkTargetHolds(c, new Uint8Array(4096), 'zeros written');
      zeros[1234] = 1;
      await init.submit(peer, batchOf([{ op: 'write', local: z.addr, remote: base, length: 4096 }]), { timeoutMs: 5000 });
      const err = await checkTargetHolds(c, new Uint8Array(4096), 'one byte corrupted').catch((e: unknown) => e);
      assert.match(String(err), /verification failed: one byte corrupted/);
    } finally {
      await init.close();
    }
  } finally {
    control.close();
    child.stdin!.end();
    await new Promise((r) => child.once('exit', r));
  }
});

const why = unavailable();
if (why) {
  console.log(`  skipped te bench against the real Mooncake binary: ${why}`);
  test.skip(`te bench --target <Mooncake target> --wire mooncake --verify — skipped: ${why}`, () => undefined);
  test.skip(`Mooncake initiator into te bench --mode target --wire mooncake — skipped: ${why}`, () => undefined);
} else {
  test('te bench --target <Mooncake target> --wire mooncake --verify (pooled and per request)', async () => {
    const target = await startTarget(32 << 20);
    try {
      for (const pool of ['true', 'false']) {
        const r = bench([
          '--target',
          target.segment,
          '--block-size',
          '64k',
          '--batch-size',
          '32',
          '--concurrency',
          '2',
          '--duration',
          '0.5',
          '--verify',
          '--option',
          `connectionPool=${pool}`,
        ]);
        assert.is(r.status, 0, r.stderr);
        assert.ok(r.result.verified && r.result.bytes > 0);
      }
    } finally {
      await target.stop();
    }
  });

  test('a Mooncake initiator writes into and reads from te bench --mode target --wire mooncake', async () => {
    const child = spawn(process.execPath, [te, 'bench', '--mode', 'target', '--wire', 'mooncake', '--bytes', '16MiB', '--exit-with-parent'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    try {
      const ready = await new Promise<{ ready: string; segment: string }>((resolve, reject) => {
        createInterface({ input: child.stdout! }).once('line', (l) => resolve(JSON.parse(l)));
        child.once('exit', (c) => reject(new Error(`target exited ${c}`)));
      });
      assert.match(ready.ready, /^127\.0\.0\.1:\d+$/);
      for (const op of ['write', 'read'] as const) {
        const r = await runInitiator({ segment: ready.ready, op, blockSize: 65536, batchSize: 128, seconds: 1 });
        assert.is(r.code, 0, r.log.slice(-1500));
        assert.ok(r.batches > 0);
      }
    } finally {
      child.stdin!.end();
      await new Promise((r) => child.once('exit', r));
    }
  });
}

test.run();
