/**
 * Where this process runs, as far as a same-host transport cares: the machine (boot id,
 * host name), the pid and network namespaces (process_vm_* names processes by pid, the
 * abstract socket lives in the network namespace) and the user. Published in the endpoint;
 * a peer is reachable only when all of them match.
 */
import { readFileSync, readlinkSync } from 'node:fs';
import { hostname } from 'node:os';

export interface Locality {
  bootId: string;
  host: string;
  pidNs: string;
  netNs: string;
  uid: number;
}

function read(fn: () => string): string {
  try {
    return fn().trim();
  } catch {
    return '';
  }
}

let cached: Locality | undefined;

export function localLocality(): Locality {
  cached ??= {
    bootId: read(() => readFileSync('/proc/sys/kernel/random/boot_id', 'utf8')),
    host: hostname(),
    pidNs: read(() => readlinkSync('/proc/self/ns/pid')),
    netNs: read(() => readlinkSync('/proc/self/ns/net')),
    uid: process.geteuid?.() ?? -1,
  };
  return cached;
}

/** Why `peer` cannot be reached from `me` by a same-host transport, or undefined when it can. */
export function unreachableBecause(me: Locality, peer: Locality): string | undefined {
  if (me.bootId !== '' && peer.bootId !== '' ? me.bootId !== peer.bootId : me.host !== peer.host)
    return `it runs on another machine (host ${peer.host}, boot id ${peer.bootId || '?'})`;
  if (me.pidNs !== '' && peer.pidNs !== '' && me.pidNs !== peer.pidNs) return `it runs in another pid namespace (${peer.pidNs})`;
  if (me.netNs !== '' && peer.netNs !== '' && me.netNs !== peer.netNs)
    return `it runs in another network namespace (${peer.netNs}), where its abstract socket is not visible`;
  if (me.uid !== peer.uid) return `it runs as uid ${peer.uid}, this process as uid ${me.uid} (same-user peers only)`;
  return undefined;
}

/** Yama's ptrace_scope: 0..3, or undefined where Yama is not built in. */
export function ptraceScope(): number | undefined {
  const raw = read(() => readFileSync('/proc/sys/kernel/yama/ptrace_scope', 'utf8'));
  return raw === '' ? undefined : Number(raw);
}
