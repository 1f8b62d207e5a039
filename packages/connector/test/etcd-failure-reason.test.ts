// What a person reads when etcd cannot be reached: the real etcd3 client against a port
// nothing listens on, through the engine's own call wrapper.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { etcdCall, openEtcdClient } from '../src/metadata/etcd-client.js';
import { isTransferError } from '../src/index.js';
import { freePort } from './fixtures/etcd-harness.js';

test('a refused etcd endpoint is PEER_UNREACHABLE naming it, says what to do, and carries no empty gRPC note', async () => {
  const endpoint = `127.0.0.1:${await freePort()}`;
  const client = await openEtcdClient([endpoint], 2_000);
  try {
    const error = await etcdCall([endpoint], client.get('te/probe').buffer(), 10_000, 'reading a key').then(
      () => assert.unreachable('nothing listens there'),
      (e: unknown) => e,
    );
    assert.ok(isTransferError(error, 'PEER_UNREACHABLE'), String(error));
    const message = (error as Error).message;
    assert.match(message, `etcd at ${endpoint} failed while reading a key: nothing listens there (connection refused): start etcd`);
    assert.match(message, /ECONNREFUSED/);
    assert.not.match(message, /Resolution note:\s*$/);
  } finally {
    client.close();
  }
});

test.run();
