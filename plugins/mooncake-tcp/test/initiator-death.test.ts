// An initiator that dies mid-WRITE lands nothing more: its kernel resets its connections
// instead of sending on the bytes left in their send buffers. The runtime above relies on
// it: a decode told that its prefill's process is gone may free the pages it was writing.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { stopProcess, tcpSocketsOf, until } from '@te/testkit';
import { MiB, spawnTarget } from './helpers.js';

test('a WRITE whose initiator is killed while its bytes wait in the socket buffers lands none of them at the target', async () => {
  const size = 8 * MiB;
  const target = await spawnTarget(size);
  const initiator = await spawnTarget(size, { lanesPerPeer: 1 });
  try {
    const port = (target.info.endpoint as { port: number }).port;
    await initiator.call('fill', { seed: 7, offset: 0, length: size });
    // The one lane's connection is opened (and handshaked) while the target still answers.
    await initiator.call('write', { info: target.info, length: 4096, wait: true });
    await target.call('zero');
    const untouched = await target.call('hash', { offset: 0, length: size });
    // A stopped target reads nothing: the WRITE fills the socket buffers on both sides.
    await stopProcess(target.child.pid!);
    try {
      await initiator.call('write', { info: target.info, length: size });
      // Bytes the initiator has sent toward the target and not had acknowledged.
      const queued = () => tcpSocketsOf(initiator.child.pid!).reduce((n, s) => n + (s.remotePort === port ? s.unacked : 0), 0);
      await until(
        () => `the WRITE queued 1 MiB toward the stopped target (${queued()} B)`,
        () => queued() >= MiB,
      );
      await initiator.kill('SIGKILL');
    } finally {
      target.child.kill('SIGCONT');
    }
    // The target reads whatever still reached it and drops the connection the dead initiator's
    // kernel reset: once it holds no connection on its port, nothing of that WRITE can land.
    const served = () => tcpSocketsOf(target.child.pid!).filter((s) => s.localPort === port);
    await until(
      () => `the target dropped the dead initiator's connection (${JSON.stringify(served())})`,
      () => served().length === 0,
    );
    assert.is(await target.call('hash', { offset: 0, length: size }), untouched, 'no byte of the dead initiator’s WRITE landed');
  } finally {
    await initiator.kill();
    await target.call('exit').catch(() => {});
  }
});

test.run();
