import pc from 'picocolors';
import { PluginRegistry } from '@te/connector';
import { commandConfig } from '../config.js';
import { runPipeline } from '../demo/pipeline/run.js';
import { printDoctor, runDoctor } from './doctor.js';

export interface DemoOptions {
  connector?: string;
  modulePath?: string;
  layers: string;
  tokens: string;
  imageTokens: string;
  hidden: string;
  requests: string;
  concurrency: string;
  layerMs: string;
  encodeMs: string;
  images: string;
  poolImages: string;
  failEncoder: string[];
  json?: boolean;
}

function positive(name: string, value: string, min = 1): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) throw Object.assign(new Error(`Expected --${name} to be an integer ≥ ${min}, got "${value}"`), { usage: true });
  return n;
}

/**
 * The main job on one machine: the encoder → prefill → decode pipeline behind an
 * OpenAI-style proxy, every request verified (see demo/pipeline).
 */
export async function demoCommand(o: DemoOptions): Promise<void> {
  const config = await commandConfig({ ...(o.connector ? { plugin: o.connector } : {}), ...(o.modulePath ? { modulePath: o.modulePath } : {}) });
  try {
    await new PluginRegistry().resolve({ connector: config.connector, ...(config.modulePath ? { modulePath: config.modulePath } : {}) });
  } catch (e) {
    console.log(pc.yellow(`The demo needs the ${config.connector} transport, which cannot be loaded here:\n${(e as Error).message}\n`));
    printDoctor(await runDoctor());
    process.exitCode = 1;
    return;
  }
  const ok = await runPipeline({
    connector: config.connector,
    ...(config.modulePath ? { modulePath: config.modulePath } : {}),
    layers: positive('layers', o.layers),
    tokens: positive('tokens', o.tokens),
    imageTokens: positive('image-tokens', o.imageTokens),
    hidden: positive('hidden', o.hidden),
    requests: positive('requests', o.requests),
    concurrency: positive('concurrency', o.concurrency),
    layerMs: positive('layer-ms', o.layerMs, 0),
    encodeMs: positive('encode-ms', o.encodeMs, 0),
    images: positive('images', o.images),
    poolImages: positive('pool-images', o.poolImages),
    failEncoder: o.failEncoder.map((x) => positive('fail-encoder', x)),
    json: Boolean(o.json),
  });
  if (!ok) process.exitCode = 1;
}
