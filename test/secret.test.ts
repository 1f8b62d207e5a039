// One shared secret (config `secret`, TE_SECRET) secures a deployment: the control plane
// answers only holders of it (CURVE; the descriptors with addresses and keys are not
// served to anyone else), and mooncake-tcp authenticates its data connections with it.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Dealer } from 'zeromq';
import { Packr } from 'msgpackr';
import { createTransferEngine, loadConfig, type TransferEngine } from '@te/connector';

const SECRET = 'a-deployment-secret-of-32-chars!';
const packr = new Packr({ useRecords: false, int64AsType: 'bigint', mapsAsObjects: true, moreTypes: true });
const engine = (secret?: string): Promise<TransferEngine> =>
  createTransferEngine({
    connector: 'mooncake-tcp',
    bindAddress: '127.0.0.1',
    timeouts: { handshakeMs: 1500, connectMs: 1500 },
    ...(secret ? { secret } : {}),
  });

/** Asks a control endpoint for its descriptor with a bare zeromq socket (no secret). */
async function askWithoutSecret(endpoint: string, waitMs: number): Promise<unknown> {
  const d = new Dealer({ linger: 0 });
  d.connect(`tcp://${endpoint}`);
  await d.send(packr.pack({ v: 1, id: 1, type: 'te.descriptor.get' }));
  const reply = await Promise.race([d.receive().then(([m]) => packr.unpack(m!)), new Promise((r) => setTimeout(() => r(undefined), waitMs))]);
  d.close();
  return reply;
}

test('engines sharing the secret transfer; the TCP data plane authenticates', async () => {
  const a = await engine(SECRET);
  const b = await engine(SECRET);
  try {
    const src = new Uint8Array(1 << 20).map((_, i) => i & 0xff);
    const dst = new Uint8Array(1 << 20);
    const hs = await a.registerMemory(src);
    const hd = await b.registerMemory(dst);
    await a.write(b.segmentName, hs.addr, hd.addr, src.length);
    assert.equal(dst, src);
    assert.is((a.describe()['mooncake-tcp'] as { authentication?: string }).authentication, 'hmac-sha256');
  } finally {
    await a.close();
    await b.close();
  }
});

test('a process without the secret gets nothing from the control plane', async () => {
  const guarded = await engine(SECRET);
  const open = await engine();
  const stranger = await engine('another-secret-of-enough-length');
  try {
    await guarded.registerMemory(new Uint8Array(4096));
    await open.registerMemory(new Uint8Array(4096));
    // The same request answered by an endpoint without a secret, and not by one with it.
    const answered = (await askWithoutSecret(open.control.endpoint, 2000)) as { ok?: boolean; body?: { buffers?: unknown[] } } | undefined;
    assert.ok(answered?.ok && answered.body?.buffers?.length === 1, 'the open endpoint answers');
    assert.is(await askWithoutSecret(guarded.control.endpoint, 1500), undefined, 'the guarded endpoint served its descriptor without the secret');
    // Engines without it, or with another, cannot fetch the descriptor or transfer.
    for (const outsider of [open, stranger]) {
      const err = (await outsider.write(guarded.segmentName, 1n, 1n, 1, { timeoutMs: 3000 }).then(
        () => undefined,
        (e) => e,
      )) as { code?: string } | undefined;
      assert.ok(err && ['TIMEOUT', 'PEER_UNREACHABLE'].includes(err.code!), `got ${err?.code}`);
    }
  } finally {
    await guarded.close();
    await open.close();
    await stranger.close();
  }
});

test('TE_SECRET sets it; a short secret is refused', () => {
  assert.is(loadConfig({ json: { connector: 'mooncake-tcp' }, env: { TE_SECRET: SECRET } }).secret, SECRET);
  const err = (() => {
    try {
      loadConfig({ json: { connector: 'mooncake-tcp' }, env: { TE_SECRET: 'short' } });
    } catch (e) {
      return e as { code: string; message: string };
    }
  })();
  assert.is(err?.code, 'INVALID_CONFIG');
  assert.match(err!.message, /secret/);
});

test.run();
