import { codeForStatus, statusForCode, type TransferErrorCode } from './codes.js';

// A brand shared by every copy of this module (ESM and CJS builds loaded side by side,
// or two installed versions), so `instanceof TransferError` holds across them.
const BRAND = Symbol.for('te.TransferError');

export interface TransferErrorOptions {
  /** The plugin (transport) that raised it, when there is one. */
  plugin?: string;
  /** The native int32 status, when the failure came from native code. */
  status?: number;
  cause?: unknown;
  /** Per-request statuses of a batch, index-aligned with the submitted requests. */
  statuses?: Int32Array;
  /** Extra structured context (peer name, address, ...). */
  details?: Record<string, unknown>;
}

/** The one error family of te. Switch on `code`, never on `message`. */
export class TransferError extends Error {
  readonly code: TransferErrorCode;
  readonly status: number | undefined;
  readonly plugin: string | undefined;
  readonly statuses: Int32Array | undefined;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: TransferErrorCode, message: string, options: TransferErrorOptions = {}) {
    super(options.plugin ? `[${options.plugin}] ${message}` : message, { cause: options.cause });
    this.name = 'TransferError';
    this.code = code;
    this.status = options.status ?? statusForCode(code);
    this.plugin = options.plugin;
    this.statuses = options.statuses;
    this.details = options.details;
    Object.defineProperty(this, BRAND, { value: true });
  }

  /** Builds the error for a native status (used by every plugin's binding). */
  static fromStatus(status: number, message: string, options: Omit<TransferErrorOptions, 'status'> = {}): TransferError {
    return new TransferError(codeForStatus(status), message, { ...options, status });
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
  }
}

export function isTransferError(value: unknown, code?: TransferErrorCode): value is TransferError {
  return value instanceof TransferError && (code === undefined || value.code === code);
}
