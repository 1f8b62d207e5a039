import pc from 'picocolors';
import { PluginRegistry } from '@te/connector';
import { commandConfig } from '../config.js';
import { pipelineMemoryBytes, runPipeline, type PipelineOptions } from '../demo/pipeline/run.js';
import { UsageError, integerOption } from '../usage-error.js';
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

/** Beyond this the workers' memory is refused up front, as `te bench` refuses a batch over 4 GiB. */
const MAX_PIPELINE_BYTES = 4 * 2 ** 30;

/** The pipeline's options from the command line, each in its range, or a UsageError naming the option. */
export function pipelineOptions(o: DemoOptions, connector: string, modulePath: string | undefined): PipelineOptions {
  const requests = integerOption('--requests', o.requests, 1, 100_000);
  const options: PipelineOptions = {
    connector,
    ...(modulePath ? { modulePath } : {}),
    layers: integerOption('--layers', o.layers, 1, 1024),
    tokens: integerOption('--tokens', o.tokens, 1, 1 << 20),
    imageTokens: integerOption('--image-tokens', o.imageTokens, 1, 1 << 16),
    hidden: integerOption('--hidden', o.hidden, 1, 1 << 16),
    requests,
    concurrency: integerOption('--concurrency', o.concurrency, 1, 1024),
    layerMs: integerOption('--layer-ms', o.layerMs, 0, 1000),
    encodeMs: integerOption('--encode-ms', o.encodeMs, 0, 1000),
    images: integerOption('--images', o.images, 1, 100_000),
    poolImages: integerOption('--pool-images', o.poolImages, 1, 100_000),
    // A request number past --requests would fail nothing, and the run would pass without the
    // refusal it was asked to show.
    failEncoder: o.failEncoder.map((x) => integerOption('--fail-encoder', x, 1, requests)),
    json: Boolean(o.json),
  };
  const memory = pipelineMemoryBytes(options);
  if (memory > MAX_PIPELINE_BYTES)
    throw new UsageError(
      `the workers would allocate ${(memory / 2 ** 30).toFixed(1)} GiB for KV caches and the encoder's pool; keep it at or under 4 GiB (fewer --layers, --tokens, --image-tokens or --concurrency)`,
    );
  return options;
}

/**
 * The main job on one machine: the encoder → prefill → decode pipeline behind an
 * OpenAI-style proxy, every request verified (see demo/pipeline).
 */
export async function demoCommand(o: DemoOptions): Promise<void> {
  const config = await commandConfig({ ...(o.connector ? { plugin: o.connector } : {}), ...(o.modulePath ? { modulePath: o.modulePath } : {}) });
  // Three workers on one machine cannot share one fixed control port: two would fail to start.
  if (config.metadata.port !== 0)
    throw new UsageError(
      `te demo runs three workers on this machine, which cannot share the fixed handshake port ${config.metadata.port} (TE_HANDSHAKE_PORT, or metadata.port in $TE_CONFIG); unset it or set it to 0 (any free port)`,
    );
  const options = pipelineOptions(o, config.connector, config.modulePath);
  try {
    await new PluginRegistry().resolve({ connector: config.connector, ...(config.modulePath ? { modulePath: config.modulePath } : {}) });
  } catch (e) {
    console.log(pc.yellow(`The demo needs the ${config.connector} transport, which cannot be loaded here:\n${(e as Error).message}\n`));
    printDoctor(await runDoctor());
    process.exitCode = 1;
    return;
  }
  const ok = await runPipeline(options);
  if (!ok) process.exitCode = 1;
}
