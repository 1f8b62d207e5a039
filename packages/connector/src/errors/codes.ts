/**
 * The one table of error codes. Native transports report an int32 status (see
 * `native/include/te/status.h`, which must list the same numbers); TypeScript-only
 * failures (registry, config, engine lifecycle) have a code but no native status.
 *
 * Ranges follow the kind of failure, so a status alone says where to look:
 *   -1..-99 arguments and memory, -100..-199 network and peers,
 *   -200..-299 metadata and routing, -300..-399 system and lifecycle.
 */
export const NATIVE_STATUS = {
  OK: 0,
  INVALID_ARGUMENT: -1,
  ADDRESS_OUT_OF_RANGE: -2,
  MEMORY_NOT_REGISTERED: -3,
  MEMORY_OVERLAP: -4,
  MEMORY_KIND_UNSUPPORTED: -5,
  UNSUPPORTED_OPERATION: -6,
  DATA_CORRUPTED: -7,
  PEER_UNREACHABLE: -100,
  CONNECTION_LOST: -101,
  AUTH_FAILED: -102,
  BAD_FRAME: -103,
  PROTOCOL_MISMATCH: -104,
  PEER_FAILED: -105,
  PEER_NOT_FOUND: -200,
  STALE_DESCRIPTOR: -201,
  NO_COMMON_TRANSPORT: -202,
  TIMEOUT: -300,
  ABORTED: -301,
  INTERNAL: -302,
  OUT_OF_MEMORY: -303,
  NO_DEVICE: -304,
  PROVIDER_UNAVAILABLE: -305,
  POOL_EXHAUSTED: -306,
  TRANSFER_FAILED: -307,
} as const;

export type NativeStatusCode = keyof typeof NATIVE_STATUS;

/** Codes raised only on the TypeScript side. */
export const JS_ONLY_CODES = [
  'INVALID_CONFIG',
  'CONFLICTING_ENV',
  'PLUGIN_UNKNOWN',
  'PLUGIN_DUPLICATE',
  'PLUGIN_API_MISMATCH',
  'PLUGIN_LOAD_FAILED',
  'PLUGIN_INVALID',
  'UNSUPPORTED_CAPABILITY',
  'ENGINE_NOT_INITIALIZED',
  'ENGINE_CONFIG_MISMATCH',
  'ENGINE_CLOSED',
  'LAYOUT_MISMATCH',
  'MEMORY_IN_USE',
] as const;

export type TransferErrorCode = NativeStatusCode | (typeof JS_ONLY_CODES)[number];

const CODE_BY_STATUS = new Map<number, NativeStatusCode>(Object.entries(NATIVE_STATUS).map(([code, status]) => [status, code as NativeStatusCode]));

/** Maps a native status to its code; an unknown status is INTERNAL (never a bare number). */
export function codeForStatus(status: number): TransferErrorCode {
  return CODE_BY_STATUS.get(status) ?? 'INTERNAL';
}

export function statusForCode(code: TransferErrorCode): number | undefined {
  return (NATIVE_STATUS as Record<string, number>)[code];
}

export function isTransferErrorCode(value: unknown): value is TransferErrorCode {
  return typeof value === 'string' && (value in NATIVE_STATUS || (JS_ONLY_CODES as readonly string[]).includes(value));
}
