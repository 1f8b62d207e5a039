// An addon compiled without libfabric (libfabric-dev absent at build time) still loads and
// says so, with the install command: built here with -DTE_FABRIC_DISABLE=ON into
// build/nofabric and loaded in a child process through TE_MOONCAKE_RDMA_ADDON.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFileSync, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

test('built without libfabric: loads, probe() and create() name the missing package', () => {
  const require = createRequire(join(root, 'package.json'));
  const cli = join(dirname(require.resolve('cmake-js/package.json')), 'bin', 'cmake-js');
  execFileSync(process.execPath, [cli, 'build', '--out', 'build/nofabric', '--config', 'Release', '--CDTE_FABRIC_DISABLE=ON'], { cwd: root, stdio: 'ignore' });
  const script = `
    import plugin from './src/index.ts';
    const probe = await plugin.probe();
    const err = await plugin.create({ segmentName: 'x', epoch: 1n, bindAddress: '127.0.0.1', connectTimeoutMs: 2000, env: {}, log() {} }, {}).then(() => null, (e) => ({ code: e.code, message: e.message }));
    console.log(JSON.stringify({ probe, err }));`;
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: root,
    env: { ...process.env, TE_MOONCAKE_RDMA_ADDON: join(root, 'build/nofabric/Release/te_mooncake_rdma.node') },
    encoding: 'utf8',
  });
  assert.is(r.status, 0, r.stderr);
  const { probe, err } = JSON.parse(r.stdout.trim().split('\n').pop()!);
  assert.is(probe.available, false);
  assert.is(probe.details.builtWithLibfabric, false);
  assert.match(probe.reason, /built without libfabric .*apt-get install -y libfabric-dev libfabric-bin/);
  assert.is(err.code, 'PROVIDER_UNAVAILABLE');
  assert.match(err.message, /apt-get install -y libfabric-dev/);
});

test.run();
