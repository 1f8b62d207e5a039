import { execFileSync, spawn } from 'node:child_process';
import { createServer } from 'node:net';

/** Single-thread memcpy of `blockSize` blocks, measured now (the same-run ceiling of a same-host copy). */
export function memcpyGbps(blockSize: number, seconds = 0.2): number {
  const span = Math.max(blockSize, Math.min(64 << 20, blockSize * 16));
  const src = Buffer.alloc(span, 7);
  const dst = Buffer.alloc(span);
  let bytes = 0;
  let off = 0;
  const end = performance.now() + seconds * 1000;
  const start = performance.now();
  while (performance.now() < end) {
    for (let i = 0; i < 16; i++) {
      src.copy(dst, off, off, off + blockSize);
      bytes += blockSize;
      off = (off + blockSize) % (span - blockSize + 1);
    }
  }
  return bytes / ((performance.now() - start) / 1000) / 1e9;
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** iperf3's single TCP stream on loopback (one core of kernel TCP), if iperf3 is installed. */
export async function iperf3Gbps(seconds = 1): Promise<number | undefined> {
  try {
    execFileSync('iperf3', ['--version'], { stdio: 'ignore' });
  } catch {
    return undefined;
  }
  const port = await freePort();
  const server = spawn('iperf3', ['-s', '-1', '-B', '127.0.0.1', '-p', String(port)], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 300));
  try {
    const out = execFileSync('iperf3', ['-c', '127.0.0.1', '-p', String(port), '-t', String(Math.max(1, Math.round(seconds))), '-P', '1', '-J'], {
      encoding: 'utf8',
    });
    return (JSON.parse(out) as { end: { sum_received: { bits_per_second: number } } }).end.sum_received.bits_per_second / 8 / 1e9;
  } catch {
    return undefined;
  } finally {
    server.kill();
  }
}
