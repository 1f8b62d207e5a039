// A plugin over the testkit's fake transport (a test tool, in-process) that, when armed,
// flips a byte of the next write it lands (the next one `flip.when` picks, when set): a
// byte corrupted in flight, which no status reports. `flip.at` does the flipping (the test
// reaches the peer's memory in-process). With `verifying`, it declares verified writes and
// does what such a transport promises: a write of a `verifyWrites` batch whose landed bytes
// differ from those it sent fails with DATA_CORRUPTED.
import {
  NATIVE_STATUS,
  PLUGIN_API_VERSION,
  PluginRegistry,
  definePlugin,
  type BatchResult,
  type SubmitOptions,
  type TransferBatch,
  type TransportContext,
  type TransportPeer,
} from '@te/connector';
import { FakeFaults, FakeTransport, fakeBytesAt } from '@te/testkit';

export const flip: { armed: boolean; at?: (addr: bigint) => void; when?: (remote: bigint, length: bigint) => boolean } = { armed: false };

/** Verified-write batches refused unsent (the 'refusing' registry: a peer of an earlier build). */
export const refusals = { count: 0 };

class FlippingTransport extends FakeTransport {
  constructor(
    name: string,
    context: TransportContext,
    faults: FakeFaults,
    private readonly refusing: boolean,
  ) {
    super(name, context, faults);
  }

  override async submit(peer: TransportPeer, batch: TransferBatch, options: SubmitOptions): Promise<BatchResult> {
    if (this.refusing && batch.verifyWrites) {
      refusals.count++;
      return { statuses: new Int32Array(batch.opcodes.length).fill(NATIVE_STATUS.UNSUPPORTED_OPERATION), bytes: 0n };
    }
    // What a verified write sends, copied before it goes: compared with what landed.
    const sent = batch.verifyWrites ? Array.from(batch.localAddrs, (a, i) => fakeBytesAt(a, batch.lengths[i]!)?.slice()) : [];
    const r = await super.submit(peer, batch, options);
    if (flip.armed) {
      for (let i = 0; i < batch.opcodes.length; i++) {
        if (flip.when && !flip.when(batch.remoteAddrs[i]!, batch.lengths[i]!)) continue;
        flip.armed = false;
        flip.at?.(batch.remoteAddrs[i]!);
        break;
      }
    }
    sent.forEach((bytes, i) => {
      const landed = fakeBytesAt(batch.remoteAddrs[i]!, batch.lengths[i]!);
      if (r.statuses[i] === 0 && bytes && landed && Buffer.compare(bytes, landed) !== 0) {
        r.statuses[i] = NATIVE_STATUS.DATA_CORRUPTED;
        r.bytes -= batch.lengths[i]!;
      }
    });
    return r;
  }
}

const faults = new FakeFaults();

/**
 * A registry with only the flipping fake transport, as `flip-fabric`: declaring verified
 * writes when `verifying` ('refusing': declaring them, and refusing every such batch unsent).
 */
export function flippingRegistry(verifying: boolean | 'refusing' = false): PluginRegistry {
  const r = new PluginRegistry({ builtins: false });
  r.register(
    'flip-fabric',
    definePlugin({
      apiVersion: PLUGIN_API_VERSION,
      name: 'flip-fabric',
      version: '0.0.0-test',
      capabilities: {
        class: 'test',
        memoryKinds: ['cpu'],
        read: true,
        notifications: true,
        maxInFlight: 1024,
        rawAddresses: false,
        verifiedWrites: verifying !== false,
      },
      options: {},
      probe: () => ({ available: true, details: {} }),
      create: async (context: TransportContext) => new FlippingTransport('flip-fabric', context, faults, verifying === 'refusing'),
    }),
  );
  return r;
}
