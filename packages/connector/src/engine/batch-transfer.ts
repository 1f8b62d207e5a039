// One batch through the engine: its options checked, its requests routed across the transports
// both sides share, each part submitted under one deadline, and every part settled before the
// caller is released, into one result or one TransferError.
import type { TeConfig } from '../config/types.js';
import { TransferError, isTransferError } from '../errors/transfer-error.js';
import { codeForStatus } from '../errors/codes.js';
import { attachSettlement, markRemoteMayBeWritten, remoteMayBeWritten } from '../errors/settlement.js';
import { batchOf, copyBatch, gathersRows, scattersRows, selectRequests, type BatchResult, type SubmitOptions, type TransferBatch } from '../spi/batch.js';
import type { TransportPeer } from '../spi/transport.js';
import { checkBatch, checkTimeout, type BatchShape } from './batch-check.js';
import type { BatchStats } from './batch-stats.js';
import type { TransferOptions } from './engine-api.js';
import type { MemoryMap } from './memory-map.js';
import type { PeerState, PeerTable } from './peer-table.js';
import { commonTransports, planRoutes, type EngineTransport, type Route, type RoutePlan } from './router.js';
import { checkSegmentName } from './segment-name.js';
import { beforeDeadline, type Watchdog } from './watchdog.js';

/** Codes after which the peer's cached descriptor and connections are dropped (the next batch fetches them again). */
const RECONNECT_CODES = new Set(['STALE_DESCRIPTOR', 'CONNECTION_LOST', 'PEER_FAILED', 'PEER_UNREACHABLE']);

/** What a batch needs of its engine, and no more. */
export interface TransferContext {
  readonly held: readonly EngineTransport[];
  readonly memory: MemoryMap;
  readonly peers: PeerTable;
  /** Submits through a transport, and answers the caller if the transport does not settle in time. */
  readonly watchdog: Watchdog;
  readonly stats: BatchStats;
  /** `forceTcp`, and `timeouts.transferMs` for a batch whose options name no deadline. */
  readonly config: Pick<TeConfig, 'forceTcp' | 'timeouts'>;
  forgetSegment(segment: string): Promise<void>;
}

/** One call of `transfer` once its options are checked. */
interface TransferCall {
  segment: string;
  batch: TransferBatch;
  deadline: number;
  signal: AbortSignal | undefined;
  notify: Uint8Array | undefined;
}

/** A call's routes through the peer's shared transports. */
interface RoutedCall extends TransferCall {
  state: PeerState;
  plan: RoutePlan;
  /** The notification follows alone once all data landed (through `notifier`) instead of riding with the data. */
  trailing: boolean;
  notifier: EngineTransport | undefined;
  /** Parts whose transport had not settled when the watchdog released the caller (made on the first). */
  unsettled: Promise<unknown>[] | undefined;
}

/** Moves `batch` to or from `segment`; see `TransferEngine.transfer`. */
export async function transferBatch(ctx: TransferContext, segment: string, batch: TransferBatch, options: TransferOptions): Promise<BatchResult> {
  // A known peer's name was checked when it was first looked up (every way into the table checks it).
  const known = typeof segment === 'string' ? ctx.peers.lookedUp(segment) : undefined;
  if (!known) checkSegmentName(segment);
  const shape = checkBatch(batch);
  const { deadline, signal, notify } = checkOptions(options, ctx.config.timeouts.transferMs);
  // A known peer is routed without an asynchronous step (the common case): its transport
  // takes the batch before `transfer` returns. A new one is looked up first, so its batch is
  // copied: what moves is what the call said, whatever the caller's arrays say after the call.
  const routed = known
    ? routeWith(ctx, { segment, batch, deadline, signal, notify }, shape, known)
    : await routeCall(ctx, { segment, batch: copyBatch(batch), deadline, signal, notify: notify?.slice() }, shape);
  const { routes, refused } = routed.plan;
  const requests = batch.opcodes.length;
  // One transport takes the whole batch (the common case): its part is the batch, submitted
  // from here without gathering, and its statuses are the batch's.
  const whole = routes.length === 1 && routes[0]!.indexes === null && refused.size === 0 && !routed.trailing ? routes[0]! : undefined;
  let statuses: Int32Array;
  const startedAt = performance.now();
  ctx.stats.started(routes);
  let bytes: bigint;
  ctx.peers.acquire(routed.state);
  try {
    if (whole) {
      const result = await submitPart(ctx, routed, whole.via, routed.batch, routed.notify);
      // Checked as the transport settled (transport-answer.ts): one Int32Array status per request.
      statuses = result.statuses;
      bytes = result.bytes;
    } else {
      statuses = new Int32Array(requests);
      for (const [i, status] of refused) statuses[i] = status;
      bytes = await submitParts(ctx, routed, statuses);
    }
  } catch (error) {
    // Whichever part's error is thrown, the caller may wait for every transport to let go.
    if (routed.unsettled && typeof error === 'object' && error !== null) attachSettlement(error, routed.unsettled);
    ctx.stats.count(routes, routed.batch, false);
    ctx.stats.settled(routes, segment, requests, isTransferError(error) ? error.code : 'INTERNAL', 0n, startedAt);
    ctx.peers.release(routed.state);
    if (isTransferError(error) && RECONNECT_CODES.has(error.code)) await ctx.forgetSegment(segment);
    throw error;
  }
  ctx.peers.release(routed.state);
  const failed = firstFailed(statuses);
  ctx.stats.count(routes, routed.batch, failed < 0);
  ctx.stats.settled(routes, segment, requests, failed < 0 ? undefined : codeForStatus(statuses[failed]!), failed < 0 ? bytes : 0n, startedAt);
  if (failed >= 0) {
    const error = failedRequestsError(segment, routed.batch, statuses, failed);
    if (RECONNECT_CODES.has(error.code)) await ctx.forgetSegment(segment);
    throw error;
  }
  return { statuses, bytes };
}

/** The call's signal and notification checked; its deadline starts now. */
function checkOptions(options: TransferOptions, transferMs: number): Pick<TransferCall, 'deadline' | 'signal' | 'notify'> {
  const timeoutMs = checkTimeout(options.timeoutMs ?? transferMs);
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal))
    throw new TransferError('INVALID_ARGUMENT', 'Expected the `signal` option to be an AbortSignal');
  if (options.notify !== undefined && !(options.notify instanceof Uint8Array))
    throw new TransferError('INVALID_ARGUMENT', 'Expected the `notify` option to be a Uint8Array');
  if (options.signal?.aborted) throw new TransferError('ABORTED', 'The transfer was aborted before it started');
  return { deadline: Date.now() + timeoutMs, signal: options.signal, notify: options.notify };
}

/** Fetches the peer's descriptor, then routes the call (`routeWith`). */
async function routeCall(ctx: TransferContext, call: TransferCall, shape: BatchShape): Promise<RoutedCall> {
  const state = await beforeDeadline(ctx.peers.state(call.segment), call.deadline, call.signal, `fetching the descriptor of ${call.segment}`);
  return routeWith(ctx, call, shape, state);
}

/** Splits the batch across the transports both sides share. */
function routeWith(ctx: TransferContext, call: TransferCall, shape: BatchShape, state: PeerState): RoutedCall {
  const { segment, batch, notify } = call;
  const candidates = (state.candidates ??= commonTransports(ctx.held, state.descriptor, ctx.config.forceTcp));
  const plan = planRoutes(batch, ctx.memory, state.routing, candidates);
  // With one route the notification rides with the data; with several (or none: an
  // empty batch of mixed-kind peers) it follows alone once all data landed.
  // A request refused before submission also defers it: the note then never goes out.
  const trailing = notify !== undefined && (plan.routes.length !== 1 || plan.refused.size > 0);
  const notifier = trailing ? candidates.find((c) => c.plugin.capabilities.notifications) : undefined;
  if (trailing && !notifier) throw new TransferError('UNSUPPORTED_CAPABILITY', `No transport shared with ${segment} delivers notifications`);
  for (let i = 0; i < plan.routes.length; i++) checkCapabilities(plan.routes[i]!, batch, shape, notify !== undefined && !trailing);
  // Written out rather than spread from `call`: V8 gave each spread copy a hidden class of its
  // own, so every batch paid for a new one (9% of the JS thread, 64 KiB batches on rdma).
  // A trailing notification goes out after the data settled: its bytes are the call's, copied now.
  const note = trailing ? notify!.slice() : notify;
  return { segment, batch, deadline: call.deadline, signal: call.signal, notify: note, state, plan, trailing, notifier, unsettled: undefined };
}

function checkCapabilities(route: Readonly<Route>, batch: TransferBatch, shape: BatchShape, notify: boolean): void {
  const caps = route.via.plugin.capabilities;
  if (shape.gathers && !caps.gatherWrites && anyRequest(route, batch, gathersRows))
    throw new TransferError(
      'UNSUPPORTED_CAPABILITY',
      'This transport does not gather written rows (capabilities.gatherWrites is not set); send contiguous requests',
      { plugin: route.via.name },
    );
  if (shape.scatters && !caps.scatterWrites && anyRequest(route, batch, scattersRows))
    throw new TransferError(
      'UNSUPPORTED_CAPABILITY',
      'This transport does not write into remote rows (capabilities.scatterWrites is not set); send contiguous requests',
      { plugin: route.via.name },
    );
  if (shape.verifies && !caps.verifiedWrites)
    throw new TransferError(
      'UNSUPPORTED_CAPABILITY',
      'This transport does not verify writes (capabilities.verifiedWrites is not set); send the batch without `verifyWrites`, or checksum the bytes yourself',
      { plugin: route.via.name },
    );
  const { hasRead } = shape;
  if (hasRead && !caps.read) {
    const reads = route.indexes ? [...route.indexes].some((i) => batch.opcodes[i] === 0) : true;
    if (reads)
      throw new TransferError('UNSUPPORTED_CAPABILITY', 'This transport does not support READ (capabilities.read is false)', { plugin: route.via.name });
  }
  if (notify && !caps.notifications) {
    throw new TransferError('UNSUPPORTED_CAPABILITY', 'This transport does not deliver notifications (capabilities.notifications is false)', {
      plugin: route.via.name,
    });
  }
}

/** Whether any request of the route's part satisfies `has`. */
function anyRequest(route: Readonly<Route>, batch: TransferBatch, has: (b: TransferBatch, i: number) => boolean): boolean {
  return route.indexes === null || route.indexes.some((i) => has(batch, i));
}

/**
 * Submits every part and waits for all of them, filling `statuses`; then the trailing
 * notification, if every request succeeded. Returns the bytes moved; throws the first part's error.
 */
async function submitParts(ctx: TransferContext, call: RoutedCall, statuses: Int32Array): Promise<bigint> {
  const { batch, trailing, notify } = call;
  // Every part settles before the caller is released, so no transport still uses the
  // caller's memory when one part failed early.
  const settled = await Promise.allSettled(
    call.plan.routes.map(async (route) => {
      const result = await submitPart(ctx, call, route.via, route.indexes ? selectRequests(batch, route.indexes) : batch, trailing ? undefined : notify);
      if (route.indexes) route.indexes.forEach((i, j) => (statuses[i] = result.statuses[j]!));
      else statuses.set(result.statuses);
      return result;
    }),
  );
  const rejected = settled.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (rejected.length > 0) {
    // The first part's error is thrown; if another part's write may still land at the
    // peer, the thrown error says so too.
    if (rejected.some((r) => remoteMayBeWritten(r.reason))) markRemoteMayBeWritten(rejected[0]!.reason);
    throw rejected[0]!.reason;
  }
  let bytes = 0n;
  for (const r of settled as PromiseFulfilledResult<BatchResult>[]) bytes += r.value.bytes;
  if (trailing && statuses.every((st) => st === 0)) await submitPart(ctx, call, call.notifier!, batchOf([]), notify);
  return bytes;
}

/** The index of the first request that failed, or -1. */
function firstFailed(statuses: Int32Array): number {
  for (let i = 0; i < statuses.length; i++) if (statuses[i] !== 0) return i;
  return -1;
}

/** One part through one transport, once its connection to the peer is open, under the call's deadline. */
function submitPart(ctx: TransferContext, call: RoutedCall, via: EngineTransport, part: TransferBatch, notify: Uint8Array | undefined): Promise<BatchResult> {
  // Not an async function: a connected peer's part is the transport's own promise, no wrapper.
  const ready = ctx.peers.openedPeer(call.state, via);
  if (ready) return submitTo(ctx, call, via, ready, part, notify);
  // Submitted once the connection is open, after `transfer` returned: the caller's arrays
  // (a part of several routes is a copy already) and notification are copied now.
  const own = part === call.batch ? copyBatch(part) : part;
  const note = notify?.slice();
  return beforeDeadline(ctx.peers.open(call.state, via), call.deadline, call.signal, `connecting to ${call.segment} over ${via.name}`).then((peer) =>
    submitTo(ctx, call, via, peer, own, note),
  );
}

function submitTo(
  ctx: TransferContext,
  call: RoutedCall,
  via: EngineTransport,
  peer: TransportPeer,
  part: TransferBatch,
  notify: Uint8Array | undefined,
): Promise<BatchResult> {
  const submitOptions: SubmitOptions = { timeoutMs: Math.max(1, call.deadline - Date.now()) };
  if (call.signal) submitOptions.signal = call.signal;
  if (notify) submitOptions.notify = notify;
  return ctx.watchdog.submit(via, peer, part, submitOptions, call);
}

/** The error of a batch whose transports settled but some requests failed: the first failure's code, every status. */
function failedRequestsError(segment: string, batch: TransferBatch, statuses: Int32Array, failed: number): TransferError {
  const count = statuses.reduce((acc, s) => acc + (s !== 0 ? 1 : 0), 0);
  const code = codeForStatus(statuses[failed]!);
  return new TransferError(
    code,
    `${count} of ${statuses.length} requests to ${segment} failed; first: request ${failed} (${code}, remote 0x${batch.remoteAddrs[failed]!.toString(16)}, ${batch.lengths[failed]} bytes)`,
    {
      statuses,
      status: statuses[failed]!,
      details: { segment, firstFailed: failed },
    },
  );
}
