import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ControlServer, P2PHandshake } from '../src/index.js';

test('the handshake keeps a bounded number of control clients: least recently used idle ones go first', async () => {
  const server = new ControlServer();
  await server.bind('127.0.0.1', 0);
  const h = new P2PHandshake(server, undefined, 8, 60_000);
  try {
    const first = h.client('127.0.0.1:40001');
    for (let i = 2; i <= 40; i++) h.client(`127.0.0.1:${40000 + i}`);
    assert.ok(h.size <= 8, `${h.size} clients kept for 40 peers`);
    // The oldest was evicted: asking again gives a new, working client.
    const again = h.client('127.0.0.1:40001');
    assert.is.not(again, first);
    assert.is(h.client('127.0.0.1:40001'), again, 'a kept client is reused');
  } finally {
    await h.close();
    await server.close();
  }
});

test('idle clients expire; a busy one is never closed under a request', async () => {
  const server = new ControlServer();
  const endpoint = await server.bind('127.0.0.1', 0);
  // The handler hands out its release once the request reached it: releasing after a fixed
  // sleep instead left the request unanswered whenever it took longer than the sleep to arrive.
  let arrived: (release: () => void) => void = () => undefined;
  const received = new Promise<() => void>((r) => (arrived = r));
  server.handle('slow', () => new Promise<string>((r) => arrived(() => r('done'))));
  const h = new P2PHandshake(server, undefined, 2, 50);
  try {
    const busy = h.client(endpoint);
    const answer = busy.request('slow', null, 5_000);
    const release = await received;
    await new Promise((r) => setTimeout(r, 120)); // past idleMs (50), while the request waits
    for (let i = 0; i < 5; i++) h.client(`127.0.0.1:${41000 + i}`);
    assert.is(h.client(endpoint), busy, 'the busy client survived eviction');
    release();
    assert.is(await answer, 'done');
    await new Promise((r) => setTimeout(r, 120));
    h.client('127.0.0.1:42000'); // triggers expiry of the now idle ones
    assert.ok(h.size <= 2, `${h.size}`);
  } finally {
    await h.close();
    await server.close();
  }
});

test.run();
