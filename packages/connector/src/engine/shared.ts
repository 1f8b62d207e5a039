import { TransferError } from '../errors/transfer-error.js';
import { loadConfig } from '../config/load.js';
import type { TeConfig, TeConfigInput } from '../config/types.js';
import { validateConfig } from '../config/validate.js';
import { TransferEngine, type CreateEngineOptions } from './transfer-engine.js';

interface SharedSlot {
  key: string;
  config: TeConfig;
  engine: Promise<TransferEngine>;
  /** Set once created, so a closed engine is noticed synchronously. */
  created?: TransferEngine;
}

// Kept on globalThis so that ESM and CJS copies of this package (or two installed
// versions) still share one engine: one segment, one listener, memory registered once.
const SLOT = Symbol.for('te.sharedTransferEngine');
const slots = globalThis as Record<symbol, SharedSlot | undefined>;

function canonical(v: unknown): unknown {
  if (typeof v === 'bigint') return `${v}n`;
  if (Array.isArray(v)) return v.map(canonical);
  if (v && typeof v === 'object')
    return Object.fromEntries(
      Object.keys(v)
        .sort()
        .map((k) => [k, canonical((v as Record<string, unknown>)[k])]),
    );
  return v;
}

// What does not shape the engine: one process may be a KV producer and an EC consumer
// (role), and each user keeps its own connector settings (extra).
const PER_USER_FIELDS = new Set(['role', 'extra']);

function engineFields(config: TeConfig): Record<string, unknown> {
  return Object.fromEntries(Object.entries(config).filter(([k]) => !PER_USER_FIELDS.has(k)));
}

/** Canonical form of the engine-shaping part of a config (sorted keys, bigint-safe). */
export function configKey(config: TeConfig): string {
  return JSON.stringify(canonical(engineFields(config)));
}

/** Top-level fields on which two configs differ. */
function differingFields(a: TeConfig, b: TeConfig): string[] {
  const ra = engineFields(a);
  const rb = engineFields(b);
  return Object.keys({ ...ra, ...rb }).filter((k) => JSON.stringify(canonical(ra[k])) !== JSON.stringify(canonical(rb[k])));
}

/**
 * Creates the process's transfer engine, or returns the existing one when called again
 * with the same config (concurrent callers share one creation). `role` and `extra` may
 * differ between callers (a process can be KV producer and EC consumer); any other
 * difference is an ENGINE_CONFIG_MISMATCH error: a process has one segment. With no argument the
 * config comes from $TE_CONFIG and the environment.
 */
export function initTransferEngine(input?: TeConfig | TeConfigInput, options?: CreateEngineOptions): Promise<TransferEngine> {
  let config: TeConfig;
  try {
    config = input === undefined ? loadConfig() : validateConfig(input);
  } catch (error) {
    return Promise.reject(error);
  }
  const key = configKey(config);
  let existing = slots[SLOT];
  if (existing?.created?.closed) {
    // Closed through engine.close() rather than closeTransferEngine(): start afresh.
    slots[SLOT] = existing = undefined;
  }
  if (existing) {
    if (existing.key === key) return existing.engine;
    const fields = differingFields(existing.config, config);
    return Promise.reject(
      new TransferError(
        'ENGINE_CONFIG_MISMATCH',
        `The transfer engine of this process was already initialised with a different config (differs in: ${fields.join(', ')}); reuse it with getTransferEngine(), or close it first with closeTransferEngine()`,
        {
          details: { fields },
        },
      ),
    );
  }
  const slot: SharedSlot = { key, config, engine: TransferEngine.create(config, options) };
  slots[SLOT] = slot;
  slot.engine.then(
    (engine) => {
      slot.created = engine;
    },
    () => {
      if (slots[SLOT] === slot) slots[SLOT] = undefined;
    },
  );
  return slot.engine;
}

/** The engine created by `initTransferEngine`; ENGINE_NOT_INITIALIZED before that. */
export async function getTransferEngine(): Promise<TransferEngine> {
  const slot = slots[SLOT];
  if (!slot) throw new TransferError('ENGINE_NOT_INITIALIZED', 'No transfer engine in this process yet: call initTransferEngine(config) first');
  const engine = await slot.engine;
  if (engine.closed) throw new TransferError('ENGINE_CLOSED', 'The shared transfer engine was closed; call initTransferEngine(config) again');
  return engine;
}

/** Whether the shared engine exists (initialised or being initialised). */
export function hasTransferEngine(): boolean {
  return slots[SLOT] !== undefined;
}

/** Closes the shared engine; a later `initTransferEngine` creates a new one. */
export async function closeTransferEngine(): Promise<void> {
  const slot = slots[SLOT];
  if (!slot) return;
  slots[SLOT] = undefined;
  const engine = await slot.engine.catch(() => undefined);
  await engine?.close();
}
