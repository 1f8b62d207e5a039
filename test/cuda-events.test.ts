import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { join } from 'node:path';
import { isTransferError } from '@te/connector';
import { addonLoader, cudaEventsOf, probeCuda, type NativeCudaModule } from '@te/cuda';

/*
 * The CUDA event helper of @te/cuda, through a CUDA addon as built here (mooncake-intra-
 * nvlink's; both CUDA addons export the same `events`). Without a GPU it loads and every
 * record fails with NO_DEVICE, as a TransferError carrying the probe's reason; with one, an
 * event on the default stream settles. The waiter's logic (reports once ready, device
 * faults, the pending bound, close) runs on the fault-injection runtime in
 * native/cuda/test/event_waiter_test.cpp.
 */
const root = join(import.meta.dirname, '..', 'plugins', 'mooncake-intra-nvlink');
const load = addonLoader<NativeCudaModule>({
  plugin: 'mooncake-intra-nvlink',
  pkg: '@te/mooncake-intra-nvlink',
  addon: 'te_mooncake_intra_nvlink.node',
  envVar: 'TE_MOONCAKE_INTRA_NVLINK_ADDON',
  root,
});
const events = cudaEventsOf(load, 'mooncake-intra-nvlink');
const gpu = probeCuda(load).available;

const withoutGpu = (name: string, body: () => Promise<void>) => {
  if (gpu) {
    console.log(`  skipped "${name}": a GPU is present (this case checks the no-device path)`);
    test.skip(name, body);
  } else test(name, body);
};
const withGpu = (name: string, body: () => Promise<void>) => {
  if (!gpu) {
    console.log(`  skipped "${name}": no usable GPU here (test/gpu/run.sh runs it on one)`);
    test.skip(name, body);
  } else test(name, body);
};

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => assert.unreachable('expected a rejection'),
    (e: unknown) => e,
  );
}

test('the addon exports the event surface', () => {
  const native = load();
  assert.type(native.events.record, 'function');
  assert.type(native.events.pending, 'function');
  assert.is(events.pending(), 0);
});

withoutGpu('record without a GPU: a NO_DEVICE TransferError naming why, nothing left pending', async () => {
  const e = await rejection(events.record());
  assert.ok(isTransferError(e, 'NO_DEVICE'), String(e));
  assert.match((e as Error).message, /\[mooncake-intra-nvlink\] .*(no CUDA device|built without CUDA)/);
  const onDevice1 = await rejection(events.record(0n, 'cuda:1'));
  assert.ok(isTransferError(onDevice1, 'NO_DEVICE'), String(onDevice1));
  assert.is(events.pending(), 0);
});

withoutGpu('readyAfter: the failure reaches whoever awaits the thunk, and is no unhandled rejection before', async () => {
  const unhandled: unknown[] = [];
  const onUnhandled = (r: unknown) => unhandled.push(r);
  process.on('unhandledRejection', onUnhandled);
  try {
    const ready = events.readyAfter(0n, 0);
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(unhandled, []);
    const e = await rejection(ready());
    assert.ok(isTransferError(e, 'NO_DEVICE'), String(e));
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});

test('bad arguments are refused with INVALID_ARGUMENT before native code', async () => {
  for (const [stream, device] of [
    [-1n, 0],
    [1n << 64n, 0],
    [0n, -1],
    [0n, 1.5],
    [0n, 'cpu'],
    [3 as unknown as bigint, 0],
  ] as const) {
    const e = await rejection(events.record(stream, device as number));
    assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), `${String(stream)}, ${String(device)}: ${String(e)}`);
  }
  assert.is(events.pending(), 0);
});

withGpu('record on the default stream settles once the GPU passed it', async () => {
  await events.record(0n, 0);
  const ready = events.readyAfter(0n, 'cuda:0');
  await ready();
  assert.is(events.pending(), 0);
});

withoutGpu('both CUDA plugins export the helper as `cudaEvents`: NO_DEVICE here, from their own addon', async () => {
  for (const name of ['mooncake-intra-nvlink', 'mooncake-nvlink']) {
    const plugin = (await import(`@te/${name}`)) as { cudaEvents: typeof events };
    const e = await rejection(plugin.cudaEvents.record());
    assert.ok(isTransferError(e, 'NO_DEVICE'), `${name}: ${String(e)}`);
    assert.match((e as Error).message, new RegExp(`\\[${name}\\]`));
  }
});

test.run();
