// A pipeline worker process (encoder, prefill or decode), started by `te demo`.
import { initTransferEngine, loadConfig } from '@te/connector';
import { exitWithStartFailure, type SentError } from '../../child-error.js';
import { startDecode } from './decode.js';
import { startEncoder } from './encoder.js';
import type { ModelSpec } from './model.js';
import { startPrefill } from './prefill.js';

export interface WorkerSpec {
  role: 'encoder' | 'prefill' | 'decode';
  model: ModelSpec;
  /** Engine config: the connector and module path, through the same loadConfig as every command. */
  config: Record<string, unknown>;
  pages: number;
  slots: number;
  poolBytes: number;
  /** Address the worker binds (engine, HTTP, bootstrap) and advertises; default 127.0.0.1. Set when the workers run on different hosts. */
  host?: string;
}

/** A worker's first message: ready (with where it listens), or why it could not start. */
export interface WorkerReady {
  ready: boolean;
  error?: SentError;
  role?: WorkerSpec['role'];
  port?: number;
  bootstrapPort?: number;
  segment?: string;
}

async function main(): Promise<void> {
  const spec = JSON.parse(process.env.TE_DEMO_WORKER ?? '') as WorkerSpec;
  const host = spec.host ?? '127.0.0.1';
  const engine = await initTransferEngine(loadConfig({ json: { ...spec.config, bindAddress: host } }));
  const started =
    spec.role === 'encoder'
      ? await startEncoder(engine, spec.model, spec.poolBytes, host)
      : spec.role === 'prefill'
        ? await startPrefill(engine, spec.model, spec.pages, spec.slots, host)
        : await startDecode(engine, spec.model, spec.pages, spec.slots, host);
  const close = async (): Promise<void> => {
    await started.close().catch(() => undefined);
    await engine.close().catch(() => undefined);
  };
  const stop = (): Promise<void> => close().then(() => process.exit(0));
  process.on('SIGTERM', () => void stop());
  process.on('message', (m: { op?: string }) => m.op === 'stop' && void stop());
  // The parent is gone (it exited or was killed): close what closes within 5 s, then end by
  // SIGKILL. Nobody reads this exit status, and process.exit() can hang for good in V8's
  // platform shutdown while a background task waits for a collection (nodejs/node#54918).
  process.on('disconnect', () => {
    const end = (): void => void process.kill(process.pid, 'SIGKILL');
    setTimeout(end, 5_000).unref();
    void close().finally(end);
  });
  process.send!({
    ready: true,
    role: spec.role,
    port: started.port,
    ...('bootstrapPort' in started && typeof started.bootstrapPort === 'number' ? { bootstrapPort: started.bootstrapPort } : {}),
    segment: engine.segmentName,
  } satisfies WorkerReady);
}

main().catch(exitWithStartFailure);
