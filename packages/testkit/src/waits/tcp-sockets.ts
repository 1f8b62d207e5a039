import { readFileSync, readdirSync, readlinkSync } from 'node:fs';

/** One TCP socket a process holds, as the kernel lists it in /proc/net/tcp and tcp6. */
export interface TcpSocket {
  localPort: number;
  remotePort: number;
  /** The kernel's state name: ESTABLISHED, CLOSE_WAIT (the peer sent FIN), CLOSE (reset), … */
  state: string;
  /** Bytes received and not yet read by the process. */
  unread: number;
  /** Bytes written and not yet acknowledged by the peer. */
  unacked: number;
}

// include/net/tcp_states.h
const STATES = ['', 'ESTABLISHED', 'SYN_SENT', 'SYN_RECV', 'FIN_WAIT1', 'FIN_WAIT2', 'TIME_WAIT', 'CLOSE', 'CLOSE_WAIT', 'LAST_ACK', 'LISTEN', 'CLOSING'];

function socketInodes(pid: number): Set<string> {
  const inodes = new Set<string>();
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return inodes; // the process is gone: it holds nothing
  }
  for (const fd of fds) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]!);
    } catch {
      // closed meanwhile
    }
  }
  return inodes;
}

export interface TcpTableRow {
  local: string; // hex address:port, as the kernel prints it
  remote: string;
  state: string;
  unread: number;
  unacked: number;
  inode: string;
}

/** The rows of one /proc/net/tcp or tcp6 text, header left out. */
export function parseTcpTable(text: string): TcpTableRow[] {
  const out: TcpTableRow[] = [];
  for (const line of text.split('\n').slice(1)) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
    const f = line.trim().split(/\s+/);
    if (f.length < 10) continue;
    const [tx, rx] = f[4]!.split(':').map((h) => parseInt(h, 16));
    out.push({ local: f[1]!, remote: f[2]!, state: STATES[parseInt(f[3]!, 16)] ?? f[3]!, unread: rx!, unacked: tx!, inode: f[9]! });
  }
  return out;
}

function readTables(): TcpTableRow[] {
  const out: TcpTableRow[] = [];
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    try {
      out.push(...parseTcpTable(readFileSync(table, 'utf8')));
    } catch {
      // no IPv6 (or no /proc): nothing listed there
    }
  }
  return out;
}

/**
 * Several reads of the tables merged into one row per socket, the later read's row winning. The
 * kernel prints its tables a page at a time and resumes each page from a position in its hash
 * table, so while other sockets open and close, one read lists some sockets twice and skips
 * others; merging two reads lists nothing twice, and a socket one read skipped is still listed.
 * A socket is known by its inode, or by its two addresses where it has none (TIME_WAIT, or closed
 * by its process with bytes still queued).
 */
export function mergeTableReads(reads: TcpTableRow[][]): TcpTableRow[] {
  const merged = new Map<string, TcpTableRow>();
  for (const read of reads) for (const r of read) merged.set(r.inode === '0' ? `${r.local}>${r.remote}` : r.inode, r);
  return [...merged.values()];
}

const rows = () => mergeTableReads([readTables(), readTables()]);

const portOf = (hexAddress: string) => parseInt(hexAddress.split(':')[1]!, 16);

/**
 * The TCP sockets process `pid` holds (listening ones left out), read from /proc: what a test
 * waits on when it means "the target has dropped that connection" or "read what was sent",
 * rather than a sleep long enough on a quiet machine. Linux only; [] for a process that is gone.
 */
export function tcpSocketsOf(pid: number): TcpSocket[] {
  const inodes = socketInodes(pid);
  return rows()
    .filter((r) => inodes.has(r.inode) && r.state !== 'LISTEN')
    .map((r) => ({ localPort: portOf(r.local), remotePort: portOf(r.remote), state: r.state, unread: r.unread, unacked: r.unacked }));
}

/**
 * Bytes on their way to process `pid` over this host's TCP connections: what it has received
 * and not read, plus what the other ends (any process of this host, this one included) have
 * sent it and not had acknowledged. More than 0 while a transfer into it is under way: the
 * event a test means by "mid-transfer", where a sleep of some milliseconds only hopes for it.
 */
export function bytesQueuedTo(pid: number): number {
  const inodes = socketInodes(pid);
  const all = rows();
  const mine = all.filter((r) => inodes.has(r.inode) && r.state !== 'LISTEN');
  const ends = new Set(mine.map((r) => r.local));
  let queued = 0;
  for (const r of mine) queued += r.unread;
  for (const r of all) if (!inodes.has(r.inode) && ends.has(r.remote)) queued += r.unacked;
  return queued;
}
