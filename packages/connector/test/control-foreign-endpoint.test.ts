// A control request sent to a port where something other than a te control endpoint listens:
// a service that greets first with its own bytes fails fast as PROTOCOL_MISMATCH, and one that
// says nothing (an HTTP server waiting for its request) times out with a message that says so.
// Before, both waited for the request's deadline and were described as a peer not running.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer, type Server, type Socket } from 'node:net';
import { ControlClient, ControlServer, isTransferError } from '../src/index.js';
import { probeEndpoint } from '../src/engine/reachability.js';

/** A TCP server on loopback that runs `onConnection` for each client; its endpoint and a closer. */
async function listener(onConnection: (socket: Socket) => void): Promise<{ endpoint: string; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
    onConnection(socket);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    endpoint: `127.0.0.1:${(server.address() as { port: number }).port}`,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

const banner = (socket: Socket): void => void socket.write('SSH-2.0-OpenSSH_9.2\r\n');
const silent = (): void => undefined;

test('the probe tells a te control endpoint, a service that greets first, a silent one and a closed port apart', async () => {
  const te = new ControlServer();
  const teEndpoint = await te.bind('127.0.0.1', 0);
  const ssh = await listener(banner);
  const quiet = await listener(silent);
  const closed = await listener(silent);
  await closed.close();
  try {
    assert.is(await probeEndpoint(teEndpoint, 2_000), 'zmtp');
    assert.is(await probeEndpoint(ssh.endpoint, 2_000), 'foreign');
    assert.is(await probeEndpoint(quiet.endpoint, 300), 'silent');
    assert.is(await probeEndpoint(closed.endpoint, 2_000), 'refused');
  } finally {
    await te.close();
    await ssh.close();
    await quiet.close();
  }
});

/** What a `te.bench.info` request to `endpoint` is rejected with (undefined if it succeeds). */
async function rejectionOf(endpoint: string, deadlineMs: number): Promise<unknown> {
  const client = new ControlClient(endpoint);
  try {
    return await client.request('te.bench.info', null, deadlineMs).then(
      () => undefined,
      (x: unknown) => x,
    );
  } finally {
    client.close();
  }
}

test('a request to a service that greets first with its own bytes fails as PROTOCOL_MISMATCH, before its deadline', async () => {
  const ssh = await listener(banner);
  try {
    // Without the probe's verdict this ends at its deadline, as TIMEOUT.
    const e = await rejectionOf(ssh.endpoint, 20_000);
    assert.ok(isTransferError(e, 'PROTOCOL_MISMATCH'), String(e));
    assert.match((e as Error).message, `${ssh.endpoint} is not a te control endpoint`);
  } finally {
    await ssh.close();
  }
});

test('a request to a silent service times out saying it sent no ZMTP greeting', async () => {
  const quiet = await listener(silent);
  try {
    const e = await rejectionOf(quiet.endpoint, 5_000);
    assert.ok(isTransferError(e, 'TIMEOUT'), String(e));
    assert.match((e as Error).message, `${quiet.endpoint} accepts connections but sent no ZMTP greeting`);
  } finally {
    await quiet.close();
  }
});

test.run();
