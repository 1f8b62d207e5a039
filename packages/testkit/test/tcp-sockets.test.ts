import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { bytesQueuedTo, tcpSocketsOf, until } from '../src/index.js';
import { mergeTableReads, parseTcpTable } from '../src/waits/tcp-sockets.js';

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

// Rows as /proc/net/tcp prints them: 127.0.0.1:8000 <-> 127.0.0.1:40000 and back, one in TIME_WAIT.
const header = '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode';
const client = '   0: 0100007F:9C40 0100007F:1F40 01 00000000:00000000 00:00000000 00000000     0        0 1001 1 0 20 4 30 10 -1';
const server = '   1: 0100007F:1F40 0100007F:9C40 01 00000000:000003E8 00:00000000 00000000     0        0 1002 1 0 20 4 30 10 -1';
const closing = '   2: 0100007F:1F40 0100007F:9C41 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0';
const table = (...lines: string[]) => [header, ...lines, ''].join('\n');

test('one read of the tables that lists a socket twice and skips another is merged with a second into one row per socket', () => {
  // While other sockets open and close, the kernel resumes a page of its table at a shifted
  // position: the first read repeats the client's row and never reaches the server's.
  const first = parseTcpTable(table(client, client, closing, closing));
  const second = parseTcpTable(table(client, server, closing));
  const merged = mergeTableReads([first, second]);
  assert.equal(merged.map((r) => r.inode).sort(), ['0', '1001', '1002']);
  assert.equal(
    merged.find((r) => r.inode === '1002'),
    { local: '0100007F:1F40', remote: '0100007F:9C40', state: 'ESTABLISHED', unread: 1000, unacked: 0, inode: '1002' },
  );
  assert.is(merged.find((r) => r.inode === '0')!.state, 'TIME_WAIT');
});

test('the later read of a socket wins: its state is the newest one', () => {
  const closeWait = server.replace(' 01 ', ' 08 ');
  const merged = mergeTableReads([parseTcpTable(table(server)), parseTcpTable(table(closeWait))]);
  assert.equal(
    merged.map((r) => r.state),
    ['CLOSE_WAIT'],
  );
});

test('tcpSocketsOf of a process that is gone is empty', () => {
  assert.equal(tcpSocketsOf(2 ** 22 + 12345), []);
});

test.run();
