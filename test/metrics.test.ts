import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Registry } from 'prom-client';
import { createMetricsRegistry, createTransferEngine, isTransferError, startMetricLog } from '@te/connector';

/*
 * Metrics after real transfers over mooncake-tcp: the prom-client registry a framework
 * scrapes (its own registry, with te's metrics added) shows the counters moved, errors by
 * code and latency; MC_TE_METRIC's periodic line reports the interval's throughput.
 */
const CONFIG = { connector: 'mooncake-tcp', bindAddress: '127.0.0.1' };

test("a framework registry gains te's metrics; transfers and a failure move them", async () => {
  const a = await createTransferEngine(CONFIG, { env: {} });
  const b = await createTransferEngine(CONFIG, { env: {} });
  try {
    const framework = new Registry();
    await createMetricsRegistry(a, { registry: framework });
    const src = await a.allocateMemory(1 << 16);
    const dst = await b.allocateMemory(1 << 16);
    for (let i = 0; i < 3; i++) await a.write(b.segmentName, src.addr, dst.addr, 1 << 16);
    await a.write(b.segmentName, src.addr, dst.addr + 65_536n - 32n, 64).catch(() => undefined); // runs past the region
    const text = await framework.metrics();
    const value = (name: string, labels: string): number => {
      const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && labels.split(',').every((kv) => l.includes(kv)));
      assert.ok(line, `${name} with ${labels} in:\n${text}`);
      return Number(line!.split(' ').pop());
    };
    assert.is(value('te_transfer_bytes_total', `transport="mooncake-tcp",peer="${b.segmentName}"`), 3 * 65536);
    assert.is(value('te_transfer_operations_total', 'transport="mooncake-tcp"'), 4);
    assert.is(value('te_transfer_errors_total', 'code="ADDRESS_OUT_OF_RANGE"'), 1);
    assert.is(value('te_transfer_batches_total', 'result="ok"'), 3);
    assert.is(value('te_transfer_batch_seconds_count', 'transport="mooncake-tcp"'), 4);
    assert.match(text, /te_transfer_in_flight/);
  } finally {
    await a.close();
    await b.close();
  }
});

test("MC_TE_METRIC's periodic line reports the interval's throughput and failures", async () => {
  const a = await createTransferEngine(CONFIG, { env: {} });
  const b = await createTransferEngine(CONFIG, { env: {} });
  const lines: string[] = [];
  // The line that counts the batch, whenever its interval ends (a slow host may need more
  // than one), within a deadline that only a missing line reaches.
  let counted: (line: string) => void;
  const countedLine = new Promise<string>((resolve) => (counted = resolve));
  const stop = startMetricLog(a, (l) => (lines.push(l), /1 batches/.test(l) && counted(l)), 0.3);
  try {
    const src = await a.allocateMemory(1 << 20);
    const dst = await b.allocateMemory(1 << 20);
    await a.write(b.segmentName, src.addr, dst.addr, 1 << 20);
    const line = await Promise.race([countedLine, new Promise<undefined>((r) => setTimeout(() => r(undefined), 10_000).unref())]);
    assert.ok(line, lines.join('\n'));
    assert.match(line!, /\[Metric\] Transfer Engine throughput: [\d.]+ MB\/s over 0.3 s, 1 batches, 0 failed/);
  } finally {
    stop();
    await a.close();
    await b.close();
  }
});

// Before: an interval of 0, 1e-9 or 1e10 s wrote the line every millisecond (a timer below
// 1 ms, or past its limit), NaN as well; a missing engine or log was a TypeError.
test('startMetricLog and createMetricsRegistry refuse what they cannot use with INVALID_ARGUMENT', async () => {
  const a = await createTransferEngine(CONFIG, { env: {} });
  try {
    const log = () => undefined;
    for (const [call, message] of [
      [() => startMetricLog(a, log, 0), /^Expected the metric interval to be seconds from 0\.01 to 86400, got 0$/],
      [() => startMetricLog(a, log, 1e10), /got 10000000000$/],
      [() => startMetricLog(a, log, Number.NaN), /got NaN$/],
      [() => startMetricLog(a, log, '5' as never), /got 5$/],
      [() => startMetricLog(undefined as never, log), /^startMetricLog needs an engine/],
      [() => startMetricLog(a, 5 as never), /^Expected startMetricLog's log to be a function, got number$/],
    ] as const) {
      let e: unknown;
      try {
        call()();
      } catch (x) {
        e = x;
      }
      assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), String(e));
      assert.match((e as Error).message, message);
    }
    const e = await createMetricsRegistry(undefined as never).then(
      () => undefined,
      (x: unknown) => x,
    );
    assert.ok(isTransferError(e, 'INVALID_ARGUMENT'), String(e));
    assert.match((e as Error).message, /^createMetricsRegistry needs the TransferEngine/);
  } finally {
    await a.close();
  }
});

test.run();
