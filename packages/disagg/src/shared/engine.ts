import { getTransferEngine, hasTransferEngine, initTransferEngine, loadConfig, type TransferEngine } from '@te/connector';

export interface EngineChoice {
  engine?: TransferEngine;
  connector?: string;
  modulePath?: string;
  config?: Record<string, unknown>;
}

/**
 * The engine a KV or EC connector uses: the one given; else, with no transport named,
 * the process's shared engine when there is one; else the shared engine for this config
 * (read through loadConfig: $TE_CONFIG, the environment, vLLM's spelling), created once
 * and shared with every other user that asks for the same config.
 */
export async function engineFor(choice: EngineChoice, extra: Record<string, unknown> = {}): Promise<TransferEngine> {
  if (choice.engine) return choice.engine;
  const named = choice.connector !== undefined || choice.modulePath !== undefined || choice.config !== undefined || Object.keys(extra).length > 0;
  if (!named && hasTransferEngine()) return getTransferEngine();
  const json = {
    ...(choice.config ?? {}),
    ...extra,
    ...(choice.connector ? { connector: choice.connector } : {}),
    ...(choice.modulePath ? { modulePath: choice.modulePath } : {}),
  };
  return initTransferEngine(loadConfig({ json }));
}
