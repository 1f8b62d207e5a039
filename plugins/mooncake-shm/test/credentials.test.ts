import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createEndpoint, register } from './helpers.js';

/*
 * A same-host transport trusts the kernel's record of who connected (SO_PEERCRED): a
 * process of another user is refused before any request is read. The child drops to
 * `nobody` with process.setuid, then uses the plugin like any initiator would.
 */
const name = 'a connection from another uid is refused by the target (AUTH_FAILED), and its memory is untouched';
const fixture = fileURLToPath(new URL('./fixtures/other-user.ts', import.meta.url));
const root = process.getuid?.() === 0;

async function refusedAcrossUsers(): Promise<void> {
  const target = await createEndpoint('credentials-target');
  const memory = new Uint8Array(4096);
  await register(target.transport, memory);
  try {
    const env = { ...process.env, TE_SHM_TEST_TARGET: JSON.stringify({ name: target.name, epoch: target.epoch.toString(), endpoint: target.transport.endpoint() }) };
    // spawnSync would block this process's event loop, which is fine: the target's accept runs on its own thread.
    const r = spawnSync(process.execPath, ['--import', 'tsx', fixture], { env, encoding: 'utf8', timeout: 20_000, cwd: fileURLToPath(new URL('..', import.meta.url)) });
    assert.is(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as { uid: number; code: string; message?: string };
    assert.is.not(out.uid, 0);
    assert.is(out.code, 'AUTH_FAILED', out.message);
    // The target saw the connection and refused it itself, naming the uid.
    const deadline = Date.now() + 2_000;
    while (!target.warnings.some((w) => w.includes(`uid ${out.uid} refused`)) && Date.now() < deadline) await new Promise((res) => setTimeout(res, 10));
    assert.ok(target.warnings.some((w) => w.includes(`uid ${out.uid} refused`)), target.warnings.join('\n'));
    assert.ok(memory.every((x) => x === 0));
  } finally {
    await target.transport.close();
  }
}

if (root) test(name, refusedAcrossUsers);
else {
  console.log(`  skipped "${name}": switching the child to nobody needs root`);
  test.skip(name, () => undefined);
}

test('a same-user peer is admitted (the control case of the test above)', async () => {
  const target = await createEndpoint('credentials-same-user');
  const other = await createEndpoint('credentials-same-user-initiator');
  try {
    const peer = await other.transport.openPeer(target.descriptor());
    await other.transport.closePeer(peer);
    assert.equal(target.warnings, []);
  } finally {
    await other.transport.close();
    await target.transport.close();
  }
});

test.run();
