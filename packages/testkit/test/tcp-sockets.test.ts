import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { bytesQueuedTo, tcpSocketsOf, until } from '../src/index.js';

test('tcpSocketsOf lists this process’s connections with their state and queues', async () => {
  const accepted: Socket[] = [];
  const server = createServer((s) => {
    s.pause(); // nothing is read: what the client sends stays queued in the kernel
    accepted.push(s);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as { port: number }).port;
  const client = connect({ host: '127.0.0.1', port });
  await once(client, 'connect');
  try {
    await until('the server accepted', () => accepted.length === 1);
    const mine = () => tcpSocketsOf(process.pid).filter((s) => s.localPort === port || s.remotePort === port);
    // Both ends are this process's; the listening socket is left out.
    assert.equal(
      mine()
        .map((s) => s.state)
        .sort(),
      ['ESTABLISHED', 'ESTABLISHED'],
    );
    client.write(Buffer.alloc(1000, 7));
    await until(
      () => `the 1000 bytes queued unread at the server's end (${JSON.stringify(mine())})`,
      () => mine().some((s) => s.localPort === port && s.unread === 1000),
    );
    // The client closes: the server's end is in CLOSE_WAIT until the server closes it too.
    client.end();
    await until(
      () => `the server's end in CLOSE_WAIT (${JSON.stringify(mine())})`,
      () => mine().some((s) => s.localPort === port && s.state === 'CLOSE_WAIT'),
    );
    accepted[0]!.destroy();
    await until('the server dropped its end', () => !mine().some((s) => s.localPort === port));
  } finally {
    client.destroy();
    for (const s of accepted) s.destroy();
    server.close();
  }
});

test("bytesQueuedTo counts what is on its way into another process: its unread bytes and the senders' unacknowledged ones", async () => {
  // A process that accepts one connection and never reads from it.
  const child = spawn(
    process.execPath,
    ['-e', "const s = require('net').createServer((c) => c.pause()).listen(0, '127.0.0.1', () => process.stdout.write(String(s.address().port)))"],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  try {
    const [line] = (await once(child.stdout!, 'data')) as [Buffer];
    const port = Number(line.toString().trim());
    if (!Number.isInteger(port)) throw new Error(`the child printed ${JSON.stringify(line.toString())}`);
    const client = connect({ host: '127.0.0.1', port });
    await once(client, 'connect');
    assert.is(bytesQueuedTo(child.pid!), 0, 'nothing sent yet');
    client.write(Buffer.alloc(8 << 20, 1)); // more than the socket buffers hold: some stays unacknowledged or unsent
    await until(
      () => `bytes queued toward the child (${bytesQueuedTo(child.pid!)})`,
      () => bytesQueuedTo(child.pid!) > 0,
    );
    client.destroy();
  } finally {
    child.kill('SIGKILL');
    await once(child, 'exit');
  }
  assert.is(bytesQueuedTo(child.pid!), 0, 'a process that is gone has nothing on its way');
});

test('tcpSocketsOf of a process that is gone is empty', () => {
  assert.equal(tcpSocketsOf(2 ** 22 + 12345), []);
});

test.run();
