// Turns registerMemory's arguments (a JS buffer, or {addr, length, device}) into the
// request every transport receives, and finds the transports that register it, refusing what none could.
import { TransferError } from '../errors/transfer-error.js';
import { MEMORY_KIND_PROVIDERS } from '../registry/builtins.js';
import { isDeviceName, memoryKindOf, type BufferSource, type DeviceName, type RegisterRequest } from '../spi/memory.js';
import type { MemoryTarget, RegisterOptions } from './engine-api.js';
import type { EngineTransport } from './router.js';
import { assertHostMapped } from './host-mapping.js';

function isBufferSource(value: unknown): value is BufferSource {
  return value instanceof ArrayBuffer || value instanceof SharedArrayBuffer || ArrayBuffer.isView(value);
}

export function toBigInt(name: string, value: unknown): bigint {
  if (typeof value === 'bigint' && value >= 0n && value <= 0xffff_ffff_ffff_ffffn) return value;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  throw new TransferError(
    'INVALID_ARGUMENT',
    `Expected \`${name}\` to be a non-negative u64 bigint (or safe integer), got ${typeof value === 'bigint' ? `${value}n` : String(value)}`,
  );
}

/** The start address `unregisterMemory` was given: a handle from `registerMemory` or the address itself. */
export function regionAddressOf(target: unknown): bigint {
  if (typeof target === 'bigint') return toBigInt('addr', target);
  if (typeof target === 'object' && target !== null && 'addr' in target) return toBigInt('addr', target.addr);
  const shown =
    typeof target === 'string' ? JSON.stringify(target) : typeof target === 'object' && target !== null ? 'an object without `addr`' : String(target);
  throw new TransferError('INVALID_ARGUMENT', `Expected the handle registerMemory returned, or its start address as a bigint, got ${shown}`);
}

export function registrationRequest(target: MemoryTarget, options: RegisterOptions): RegisterRequest {
  if (typeof options !== 'object' || options === null)
    throw new TransferError(
      'INVALID_ARGUMENT',
      `Expected registerMemory's options to be an object ({ device?, remoteAccess? }), got ${options === null ? 'null' : typeof options}`,
    );
  const remoteAccess = options.remoteAccess ?? true;
  if (typeof remoteAccess !== 'boolean') throw new TransferError('INVALID_ARGUMENT', 'Expected the `remoteAccess` option to be a boolean');
  if (isBufferSource(target)) {
    const device = options.device ?? 'cpu';
    if (device !== 'cpu') throw new TransferError('INVALID_ARGUMENT', `A JS buffer is host memory; it cannot be registered as ${device}`);
    const length = BigInt(target.byteLength);
    if (length === 0n) throw new TransferError('INVALID_ARGUMENT', 'Cannot register an empty buffer');
    return { buffer: target, length, device, remoteAccess };
  }
  if (typeof target !== 'object' || target === null)
    throw new TransferError('INVALID_ARGUMENT', 'Expected an ArrayBuffer, a typed array/Buffer, or {addr, length, device}');
  const addr = toBigInt('addr', target.addr);
  const length = toBigInt('length', target.length);
  const device = target.device ?? options.device ?? 'cpu';
  if (!isDeviceName(device)) throw new TransferError('INVALID_ARGUMENT', `Expected \`device\` to be "cpu" or "cuda:N", got ${JSON.stringify(device)}`);
  if (addr === 0n) throw new TransferError('INVALID_ARGUMENT', 'Cannot register address 0');
  if (length === 0n) throw new TransferError('INVALID_ARGUMENT', 'Cannot register an empty region');
  if (addr + length > 0xffff_ffff_ffff_ffffn)
    throw new TransferError('ADDRESS_OUT_OF_RANGE', `Region at 0x${addr.toString(16)} of ${length} bytes wraps past the end of the address space`);
  return { addr, length, device, remoteAccess };
}

/** Whether `t` registers memory of `device`: of its memory kinds, and by raw address only if it takes raw addresses. */
export function registers(t: EngineTransport, device: DeviceName, fromBuffer: boolean): boolean {
  const caps = t.plugin.capabilities;
  return caps.memoryKinds.includes(memoryKindOf(device)) && (fromBuffer || caps.rawAddresses);
}

/** The transports of `held` that register `request`; none is a typed error saying which transport would. */
function registeringTransports(held: readonly EngineTransport[], request: RegisterRequest): EngineTransport[] {
  const able = held.filter((t) => registers(t, request.device, request.buffer !== undefined));
  if (able.length > 0) return able;
  const kind = memoryKindOf(request.device);
  const raw = request.buffer === undefined ? ' raw-address' : '';
  const hint =
    kind === 'cuda'
      ? `add a transport that registers device memory to \`transports\` (${MEMORY_KIND_PROVIDERS.device})`
      : request.buffer === undefined
        ? `register a JS buffer (ArrayBuffer, typed array) instead, or add a transport that registers raw host addresses (${MEMORY_KIND_PROVIDERS.rawHost}) to \`transports\``
        : `add a transport that registers host memory (${MEMORY_KIND_PROVIDERS.host}) to \`transports\``;
  throw new TransferError(
    'MEMORY_KIND_UNSUPPORTED',
    `No transport of this engine (${held.map((t) => t.name).join(', ')}) registers${raw} ${kind} memory: ${hint}`,
    { details: { device: request.device } },
  );
}

/** `registeringTransports`, once raw host memory is known to be mapped read-write in this process (see host-mapping.ts). */
export async function registrationTargets(held: readonly EngineTransport[], request: RegisterRequest): Promise<EngineTransport[]> {
  const able = registeringTransports(held, request);
  if (request.buffer === undefined && request.addr !== undefined && request.device === 'cpu') await assertHostMapped(request.addr, request.length);
  return able;
}
