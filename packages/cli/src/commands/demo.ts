import { createHash, randomFillSync } from 'node:crypto';
import pc from 'picocolors';
import { OP_WRITE, PluginRegistry, allocateBatch, createTransferEngine } from '@te/connector';
import { spawnBenchTarget } from '../bench/loopback.js';
import { BENCH_DIGEST, BENCH_INFO, type BenchInfo } from '../bench/protocol.js';
import { gbps } from '../format.js';
import { printDoctor, runDoctor } from './doctor.js';

export interface DemoOptions {
  plugin: string;
  layers: string;
  pages: string;
  pageSize: string;
}

/**
 * The main job on one machine: a "prefill" process writes a request's KV cache, layer by
 * layer with a notification per layer, into a "decode" process over a real transport on
 * loopback; every byte is verified by digest on the decode side.
 */
export async function demoCommand(o: DemoOptions): Promise<void> {
  const layers = Number(o.layers);
  const pages = Number(o.pages);
  const pageBytes = Number(o.pageSize);
  try {
    await new PluginRegistry().load(o.plugin);
  } catch (e) {
    console.log(pc.yellow(`The demo needs the ${o.plugin} transport, which cannot be loaded here:\n${(e as Error).message}\n`));
    printDoctor(await runDoctor());
    process.exitCode = 1;
    return;
  }
  const layerBytes = pages * pageBytes;
  const total = layers * layerBytes;
  console.log(pc.bold(`te demo: ${layers} layers × ${pages} pages × ${pageBytes} B = ${(total / 2 ** 20).toFixed(1)} MiB of KV, prefill → decode over ${o.plugin} (loopback, two processes)`));
  const decode = await spawnBenchTarget(['--plugin', o.plugin, '--bytes', String(total)]);
  const prefill = await createTransferEngine({ connector: o.plugin, role: 'producer' });
  try {
    console.log(`  decode process ${decode.child.pid} serves segment ${decode.segment}`);
    console.log(`  prefill process ${process.pid} is segment ${prefill.segmentName}`);
    const info = await prefill.controlClient(decode.segment).request<BenchInfo>(BENCH_INFO, null, 10_000);
    // Connect before timing, as a serving system does when the decode instance registers.
    await prefill.openSegment(decode.segment);
    const local = await prefill.allocateMemory(total);
    const kv = local.buffer!;
    randomFillSync(kv);
    const started = performance.now();
    for (let layer = 0; layer < layers; layer++) {
      // Pages of one layer land in reverse order on the decode side, as a scattered page table would.
      const batch = allocateBatch(pages);
      for (let p = 0; p < pages; p++) {
        batch.opcodes[p] = OP_WRITE;
        batch.localAddrs[p] = local.addr + BigInt(layer * layerBytes + p * pageBytes);
        batch.remoteAddrs[p] = info.addr + BigInt(layer * layerBytes + (pages - 1 - p) * pageBytes);
        batch.lengths[p] = BigInt(pageBytes);
      }
      await prefill.transfer(decode.segment, batch, { notify: new TextEncoder().encode(`layer ${layer} ready`) });
    }
    const seconds = (performance.now() - started) / 1000;
    // What the decode side must now hold: each layer's pages reversed.
    const expected = createHash('sha256');
    for (let layer = 0; layer < layers; layer++) {
      for (let p = pages - 1; p >= 0; p--) expected.update(kv.subarray(layer * layerBytes + p * pageBytes, layer * layerBytes + (p + 1) * pageBytes));
    }
    const want = expected.digest('hex');
    const got = await prefill.controlClient(decode.segment).request<string>(BENCH_DIGEST, { offset: 0n, length: BigInt(total) }, 60_000);
    console.log(`  wrote ${layers} layers (${layers * pages} page writes, ${layers} notifications) in ${(seconds * 1000).toFixed(1)} ms: ${gbps(total / seconds)}`);
    if (got !== want) {
      console.log(pc.red(`  ✘ verification failed: decode holds sha256 ${got}, expected ${want}`));
      process.exitCode = 1;
      return;
    }
    console.log(pc.green(`  ✔ verified: every byte landed where the page table says (sha256 ${want.slice(0, 16)}…)`));
  } finally {
    await prefill.close();
    await decode.stop();
  }
}
