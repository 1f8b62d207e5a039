// How many transport threads te runs on this host, read from the transports themselves
// (engine.describe()), so a baseline can be given the same: mooncake-tcp's I/O threads,
// mooncake-rdma's rails (one endpoint and progress thread each), mooncake-shm's copy threads.
import { createTransferEngine } from '@te/connector';

/** { 'mooncake-tcp': n, 'mooncake-rdma': n, 'mooncake-shm': n } for the plugins asked about. */
export async function teThreads(plugins) {
  const out = {};
  for (const plugin of plugins) {
    const engine = await createTransferEngine({ connector: plugin, bindAddress: '127.0.0.1' });
    try {
      const d = engine.describe()[plugin] ?? {};
      if (plugin === 'mooncake-tcp') out[plugin] = Number(d.ioThreads);
      else if (plugin === 'mooncake-shm') out[plugin] = Number(d.copyThreads);
      else out[plugin] = Array.isArray(d.rails) ? d.rails.length : 1;
      if (!Number.isInteger(out[plugin]) || out[plugin] < 1) throw new Error(`${plugin}: describe() gives no thread count (${JSON.stringify(d)})`);
    } finally {
      await engine.close();
    }
  }
  return out;
}
