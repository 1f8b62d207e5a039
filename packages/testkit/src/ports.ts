import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/**
 * Ports for listeners that another process binds later (a bootstrap server, an etcd, a
 * target's control endpoint). Asking the kernel for port 0 and passing the number on is
 * racy on a busy machine: that port comes from the ephemeral range, which every outgoing
 * connection and every other port-0 listener draws from, so it can be taken before the
 * other process binds it. These ports are drawn at random from below the ephemeral range,
 * where nothing is handed out implicitly, checked free on all interfaces, and never given
 * twice by one process.
 */
const given = new Set<number>();

/** The kernel's ephemeral range (`ip_local_port_range`), or Linux's default where unreadable. */
function ephemeralRange(): [number, number] {
  try {
    const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    if (low && high && low <= high) return [low, high];
  } catch {
    // Not Linux, or /proc not mounted.
  }
  return [32768, 60999];
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen({ port, host: '0.0.0.0', exclusive: true }, () => s.close(() => resolve(true)));
  });
}

function kernelPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** A TCP port free right now that no other caller in this process was given. */
export async function freePort(): Promise<number> {
  const [low, high] = ephemeralRange();
  // Below the ephemeral range when it leaves room (Linux's default leaves 10000-32767);
  // otherwise above it; otherwise fall back to a kernel-chosen port.
  const span: [number, number] | undefined = low - 10_000 >= 1024 ? [10_000, low - 1] : high + 1000 <= 65_535 ? [high + 1, 65_535] : undefined;
  if (span) {
    for (let attempt = 0; attempt < 200; attempt++) {
      const port = span[0] + Math.floor(Math.random() * (span[1] - span[0] + 1));
      // 10080 is the only port of these ranges that fetch refuses (the Fetch standard's bad
      // ports): a bootstrap server there would never be reached.
      if (given.has(port) || port === 10080) continue;
      if (await canListen(port)) {
        given.add(port);
        return port;
      }
    }
  }
  for (;;) {
    const port = await kernelPort();
    if (!given.has(port)) {
      given.add(port);
      return port;
    }
  }
}
