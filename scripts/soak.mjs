#!/usr/bin/env node
// Soak run over mooncake-tcp (not part of `npm test`): for N minutes,
//   - process A writes random bytes into process B and reads them back (4 loops, 4 KiB to
//     8 MiB per request, 1 to 16 requests per batch, some batches with a notification),
//     comparing every byte; B counts the notifications that reached it;
//   - a churn process C does the same against B and is restarted every few seconds,
//     alternately killed (SIGKILL, mid-transfer) and closed gracefully, so B sees peers
//     vanish and come back; A also forgets B's segment periodically and reconnects;
//   - hostile connections hit B's data port (garbage, half headers left open, stale HELLOs,
//     oversized frames) and its zeromq control endpoint (garbage, half greetings, malformed
//     and oversized control messages), several per second;
// then prints a report: duration, transfers, bytes, failures, notifications, the RSS of A
// and B at start (after a warm-up) and at the end, and PASS when nothing failed and each
// end RSS is within the tolerance of its start (default: +20% or +32 MiB, whichever is
// larger). Exit status 0 only on PASS.
//   node scripts/soak.mjs [minutes=5] [--warmup 20] [--churn 15] [--tolerance-pct 20] [--tolerance-mib 32] [--json file]
// Needs the built packages (npm run build, or the build step of npm test).
import { fork } from 'node:child_process';
import { randomBytes, randomFillSync } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { parseCli } from './lib/cli.mjs';
import { TCP_OP, helloBody, tcpFrame } from './lib/tcp-frames.mjs';

const role = process.env.TE_SOAK_ROLE;
const MiB = 1024 * 1024;

// ====================================================================== engine processes
if (role) {
  // The soak is gone (ended by a signal, which skips its exit handler, or killed): end at
  // once rather than transfer on for good. SIGKILL, not process.exit(), which can hang in
  // V8's platform shutdown (nodejs/node#54918).
  process.on('disconnect', () => process.kill(process.pid, 'SIGKILL'));
  if (!process.connected) process.kill(process.pid, 'SIGKILL'); // gone while this module loaded
  const { createTransferEngine, TransferError } = await import('@te/connector');
  const send = (m) => process.send?.(m);
  const engine = await createTransferEngine({ connector: 'mooncake-tcp', bindAddress: '127.0.0.1', logLevel: 'error', metadata: { port: 0 } });
  const size = Number(process.env.TE_SOAK_BYTES);
  const mem = await engine.allocateMemory(size);
  const buf = Buffer.from(mem.buffer.buffer, mem.buffer.byteOffset, mem.buffer.byteLength);
  randomFillSync(buf); // every page touched now: RSS growth later is growth, not first touch
  let notifications = 0;
  engine.onNotification(() => notifications++);
  const tcp = engine.descriptor().transports['mooncake-tcp'].endpoint;
  send({
    ready: true,
    segment: engine.segmentName,
    addr: mem.addr.toString(),
    length: size,
    dataPort: tcp.port,
    controlPort: Number(engine.segmentName.split(':').pop()),
  });

  let stopping = false;
  const stats = { transfers: 0, bytes: 0, failures: 0, failureCodes: {}, notifies: 0, reconnects: 0 };
  const loops = [];
  process.on('message', async (m) => {
    if (m.cmd === 'run') {
      for (let i = 0; i < m.loops; i++) loops.push(transferLoop(m, i));
    } else if (m.cmd === 'stats') {
      send({ stats: { ...stats }, notifications });
    } else if (m.cmd === 'stop') {
      stopping = true;
      await Promise.all(loops);
      send({ stats: { ...stats }, notifications, stopped: true });
    } else if (m.cmd === 'exit') {
      stopping = true;
      await Promise.all(loops);
      await engine.close();
      send({ closed: true });
      process.exit(0);
    }
  });

  // Loop i owns slot i here ([write source | read-back destination]) and half a slot on the target
  // (remote slot remoteSlot0 + i, slotBytes / 2 each).
  async function transferLoop(m, i) {
    const remoteBase = BigInt(m.remoteAddr) + BigInt(m.remoteSlot0 + i) * BigInt(m.slotBytes / 2);
    const half = m.slotBytes / 2;
    const src = i * m.slotBytes;
    const dst = src + half;
    let lastForget = Date.now();
    while (!stopping) {
      if (m.forgetEveryMs && Date.now() - lastForget > m.forgetEveryMs && i === 0) {
        lastForget = Date.now();
        await engine.forgetSegment(m.segment);
        stats.reconnects++;
      }
      // A batch of n requests laid out back to back in the slot.
      const n = 1 + Math.floor(Math.random() * 16);
      const lens = [];
      let total = 0;
      for (let k = 0; k < n; k++) {
        const len = Math.random() < 0.5 ? 4096 * (1 + Math.floor(Math.random() * 16)) : Math.floor(Math.random() * 8 * MiB) + 1;
        if (total + len > half) break;
        lens.push(len);
        total += len;
      }
      if (lens.length === 0) continue;
      randomFillSync(buf, src, total);
      buf.fill(0, dst, dst + total);
      const batch = (op) => {
        const b = {
          opcodes: new Uint8Array(lens.length).fill(op),
          localAddrs: new BigUint64Array(lens.length),
          remoteAddrs: new BigUint64Array(lens.length),
          lengths: new BigUint64Array(lens.length),
        };
        let off = 0;
        lens.forEach((len, k) => {
          b.localAddrs[k] = mem.addr + BigInt((op === 1 ? src : dst) + off);
          b.remoteAddrs[k] = remoteBase + BigInt(off);
          b.lengths[k] = BigInt(len);
          off += len;
        });
        return b;
      };
      const notify = Math.random() < 0.1 ? randomBytes(64) : undefined;
      try {
        const w = await engine.transfer(m.segment, batch(1), { timeoutMs: 20_000, notify });
        const r = await engine.transfer(m.segment, batch(0), { timeoutMs: 20_000 });
        const bad = [...w.statuses, ...r.statuses].some((s) => s !== 0);
        if (bad || buf.compare(buf, src, src + total, dst, dst + total) !== 0) {
          stats.failures++;
          stats.failureCodes.MISMATCH = (stats.failureCodes.MISMATCH ?? 0) + 1;
          send({ failure: bad ? `statuses ${[...w.statuses, ...r.statuses]}` : `read-back of ${total} bytes differs from what was written` });
        } else {
          stats.transfers += 2 * lens.length;
          stats.bytes += 2 * total;
          if (notify) stats.notifies++;
        }
      } catch (e) {
        stats.failures++;
        const code = e instanceof TransferError ? e.code : 'UNTYPED';
        stats.failureCodes[code] = (stats.failureCodes[code] ?? 0) + 1;
        send({ failure: `${code}: ${e.message}` });
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }
}

// ====================================================================== the orchestrator
else {
  const { values, positionals } = parseCli({
    usage: 'node scripts/soak.mjs [minutes=5] [options]',
    summary:
      'Soak run over mooncake-tcp: transfers read back and compared, a churning peer killed and restarted, hostile connections; PASS when nothing failed and RSS stayed within the tolerance.',
    allowPositionals: true,
    options: {
      warmup: { type: 'string', number: { min: 0, max: 3600 }, default: '20', help: 'seconds before the start RSS is taken' },
      churn: { type: 'string', number: { above: 0, max: 3600 }, default: '15', help: 'seconds between restarts of the churning peer' },
      'tolerance-pct': { type: 'string', number: { min: 0 }, default: '20', help: 'allowed RSS growth in percent' },
      'tolerance-mib': { type: 'string', number: { min: 0 }, default: '32', help: 'allowed RSS growth in MiB (the larger of the two applies)' },
      json: { type: 'string', help: 'write the report as JSON to this file' },
    },
  });
  const minutes = Number(positionals[0] ?? 5);
  const warmupMs = Number(values.warmup) * 1000;
  const churnMs = Number(values.churn) * 1000;
  const tolPct = Number(values['tolerance-pct']);
  const tolMiB = Number(values['tolerance-mib']);
  const LOOPS = 4;
  const SLOT = 32 * MiB; // per loop: 16 MiB source + 16 MiB read-back on the initiator, 16 MiB used on B
  const { Dealer } = await import('zeromq');
  const { encodeMessage } = await import('@te/connector');

  const failures = [];
  const children = new Set();
  function start(name, bytes) {
    const child = fork(new URL(import.meta.url).pathname, [], {
      env: { ...process.env, TE_SOAK_ROLE: name, TE_SOAK_BYTES: String(bytes) },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    children.add(child);
    const waiters = [];
    child.on('message', (m) => {
      if (m.failure) failures.push(`${name}: ${m.failure}`);
      else waiters.shift()?.(m);
    });
    child.on('exit', (code, signal) => {
      children.delete(child);
      child.exited = { code, signal };
      while (waiters.length) waiters.shift()(undefined);
    });
    const next = () => new Promise((r) => waiters.push(r));
    return { child, name, next, ask: (cmd, extra = {}) => (child.send({ cmd, ...extra }), next()) };
  }
  const rssOf = (pid) => {
    try {
      return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;
    } catch {
      return NaN;
    }
  };
  const mib = (b) => (b / MiB).toFixed(1);
  process.on('exit', () => children.forEach((c) => c.kill('SIGKILL')));

  // B: the target (its slots: 0..3 for A, 4 for C). A: the initiator. Both live throughout.
  const B = start('B', 5 * 16 * MiB);
  const b = await B.next();
  const A = start('A', LOOPS * SLOT);
  await A.next();
  A.child.send({ cmd: 'run', loops: LOOPS, segment: b.segment, remoteAddr: b.addr, remoteSlot0: 0, slotBytes: SLOT, forgetEveryMs: 10_000 });
  console.log(`soak: ${minutes} min; A -> B (${b.segment}, data port ${b.dataPort}); churn every ${churnMs / 1000} s; warm-up ${warmupMs / 1000} s`);

  // ---------------------------------------------------------------- churn: C restarted
  let churnRestarts = 0,
    churnKills = 0,
    churnTransfers = 0,
    churnBytes = 0,
    churnFailures = 0;
  let stopChurn = false;
  const churn = (async () => {
    while (!stopChurn) {
      const C = start('C', SLOT);
      const ready = await C.next();
      if (!ready) {
        failures.push('C did not start');
        break;
      }
      C.child.send({ cmd: 'run', loops: 1, segment: b.segment, remoteAddr: b.addr, remoteSlot0: LOOPS, slotBytes: SLOT, forgetEveryMs: 0 });
      await sleep(churnMs * (0.5 + Math.random()));
      const s = await C.ask('stats');
      if (s) {
        churnTransfers += s.stats.transfers;
        churnBytes += s.stats.bytes;
        churnFailures += s.stats.failures;
      }
      if (churnRestarts % 2 === 0) {
        C.child.kill('SIGKILL');
        churnKills++;
      } else {
        await C.ask('stop');
        await C.ask('exit');
      }
      await new Promise((r) => (C.child.exited ? r() : C.child.once('exit', r)));
      churnRestarts++;
    }
  })();

  // ---------------------------------------------------------------- hostile connections
  const hostile = {};
  const count = (k) => (hostile[k] = (hostile[k] ?? 0) + 1);
  const open = new Map();
  let closedByServer = 0;
  // The span fields repeat the request's own range, as an initiator sends a whole request.
  const frame = (op, { id = 1n, addr = 0n, length = 0n, body = Buffer.alloc(0) } = {}) =>
    tcpFrame({ op, id, addr, body, length: length || BigInt(body.length), spanAddr: addr, spanLength: length || BigInt(body.length) });
  const hello = (epoch) => frame(TCP_OP.hello, { addr: epoch, body: helloBody(1, randomBytes(16), 'hostile') });
  // Held connections, per kind: how many the server closed, and for how long it let them hang.
  const held = {};
  function raw(port, bytes, { hold = false, kind = '' } = {}) {
    const s = connect(port, '127.0.0.1');
    s.on('error', () => {});
    let answer = Buffer.alloc(0);
    s.on('data', (d) => {
      if (answer.length < 56) answer = Buffer.concat([answer, d]);
      if (kind.startsWith('tcp') && answer.length >= 56 && !s.answered) {
        // A frame header came back: note its op and status (a HELLO_ACK with status 0 = accepted).
        s.answered = true;
        const key = `op 0x${answer[6].toString(16)} status ${answer.readInt32LE(8)}`;
        held[kind].answers[key] = (held[kind].answers[key] ?? 0) + 1;
      }
    });
    s.on('connect', () => {
      s.write(bytes);
      if (!hold) s.end();
    });
    if (hold) {
      const h = (held[kind] ??= { closedByServer: 0, longestMs: 0, droppedByUs: 0, answers: {} });
      const at = Date.now();
      open.set(s, { kind, at });
      s.on('close', () => {
        if (open.delete(s)) {
          closedByServer++;
          h.closedByServer++;
          h.longestMs = Math.max(h.longestMs, Date.now() - at);
        }
      });
      // Bound what we hold: past 300, the oldest is dropped by us (counted apart).
      if (open.size > 300) {
        const [oldest, o] = open.entries().next().value;
        open.delete(oldest);
        held[o.kind].droppedByUs++;
        oldest.destroy();
      }
    } else {
      setTimeout(() => s.destroy(), 2000);
    }
  }
  const dealer = new Dealer({ linger: 0 });
  dealer.connect(`tcp://${b.segment}`);
  let controlAnswered = 0;
  let controlWithId = 0;
  void (async () => {
    try {
      for await (const _ of dealer) controlAnswered++;
    } catch {
      /* closed */
    }
  })();
  let hostileId = 1;
  const kinds = [
    ['tcp-garbage', () => raw(b.dataPort, randomBytes(1 + Math.floor(Math.random() * 4096)))],
    ['tcp-half-header', () => raw(b.dataPort, hello(1n).subarray(0, 20), { hold: true, kind: 'tcp-half-header' })],
    [
      'tcp-stale-hello',
      () =>
        raw(b.dataPort, Buffer.concat([hello(BigInt('0x' + randomBytes(7).toString('hex'))), frame(TCP_OP.write, { addr: 0x1000n, body: randomBytes(256) })])),
    ],
    ['tcp-oversized', () => raw(b.dataPort, Buffer.concat([hello(0n), frame(TCP_OP.write, { addr: 0x1000n, length: 1n << 40n })]))],
    ['tcp-hello-held', () => raw(b.dataPort, hello(0n), { hold: true, kind: 'tcp-hello-held' })],
    ['zmq-garbage', () => raw(b.controlPort, randomBytes(1 + Math.floor(Math.random() * 512)))],
    ['zmq-half-greeting', () => raw(b.controlPort, Buffer.from([0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3]), { hold: true, kind: 'zmq-half-greeting' })],
    [
      'zmq-malformed',
      () => {
        const bodies = [
          randomBytes(64),
          encodeMessage({ v: { toString: 0 }, id: hostileId++, type: 'x' }),
          encodeMessage({ v: 1, id: hostileId++, type: 'y'.repeat(5000) }),
          encodeMessage({ v: 1, id: hostileId++, type: 'te.descriptor.get', body: { deep: Array(1000).fill([[[]]]) } }),
          encodeMessage({ v: 9, id: hostileId++, type: 'te.descriptor.get' }),
          encodeMessage({ v: 1, id: hostileId++, type: 'te.kv.p.register', body: { v: 1, room: -1 } }),
        ];
        const k = Math.floor(Math.random() * bodies.length);
        if (k > 0) controlWithId++; // random bytes are not msgpack: no id to answer to (dropped by design)
        void dealer.send(bodies[k]).catch(() => {});
      },
    ],
  ];
  let stopHostile = false;
  const hostileLoop = (async () => {
    let lastOversize = 0;
    while (!stopHostile) {
      const [k, fn] = kinds[Math.floor(Math.random() * kinds.length)];
      fn();
      count(k);
      if (Date.now() - lastOversize > 30_000) {
        // Above the control plane's 16 MiB cap: zeromq drops the connection before buffering it.
        lastOversize = Date.now();
        const big = new Dealer({ linger: 0 });
        big.connect(`tcp://${b.segment}`);
        void big.send(Buffer.alloc(20 * MiB)).catch(() => {});
        setTimeout(() => big.close(), 2000);
        count('zmq-oversized');
      }
      await sleep(50 + Math.random() * 100);
    }
  })();

  // ---------------------------------------------------------------- sampling and the end
  const started = Date.now();
  const samples = [];
  const sample = () => samples.push({ t: (Date.now() - started) / 1000, A: rssOf(A.child.pid), B: rssOf(B.child.pid) });
  sample();
  const first = samples[0];
  let atWarmup;
  const endAt = started + minutes * 60_000;
  while (Date.now() < endAt) {
    await sleep(Math.min(5000, endAt - Date.now()));
    sample();
    if (!atWarmup && Date.now() - started >= warmupMs) atWarmup = samples[samples.length - 1];
    if (A.child.exited || B.child.exited) {
      failures.push(`process ${A.child.exited ? 'A' : 'B'} exited: ${JSON.stringify(A.child.exited ?? B.child.exited)}`);
      break;
    }
  }
  stopHostile = true;
  stopChurn = true;
  await hostileLoop;
  await churn;
  const aStats = await A.ask('stop');
  // Let B hand pending notifications to its listener, then ask.
  await sleep(500);
  const bStats = await B.ask('stats');
  sample();
  const last = samples[samples.length - 1];
  const now = Date.now();
  const stillOpen = {};
  for (const [, o] of open) {
    const so = (stillOpen[o.kind] ??= { count: 0, oldestMs: 0 });
    so.count++;
    so.oldestMs = Math.max(so.oldestMs, now - o.at);
  }
  const ours = [...open.keys()];
  open.clear(); // closed by us from here on
  ours.forEach((s) => s.destroy());
  dealer.close();
  const seconds = (Date.now() - started) / 1000;
  await A.ask('exit');
  await B.ask('exit');

  // ---------------------------------------------------------------- report
  const base = atWarmup ?? first;
  const verdicts = ['A', 'B'].map((p) => {
    const limit = base[p] + Math.max((base[p] * tolPct) / 100, tolMiB * MiB);
    // Least-squares slope of RSS after the warm-up, MiB per minute: the trend behind the two points.
    const pts = samples.filter((s) => s.t >= base.t && Number.isFinite(s[p]));
    const mt = pts.reduce((a, s) => a + s.t, 0) / pts.length,
      mr = pts.reduce((a, s) => a + s[p], 0) / pts.length;
    const slope = pts.length > 2 ? ((pts.reduce((a, s) => a + (s.t - mt) * (s[p] - mr), 0) / pts.reduce((a, s) => a + (s.t - mt) ** 2, 0)) * 60) / MiB : NaN;
    return {
      p,
      start: base[p],
      end: last[p],
      min: Math.min(...samples.map((s) => s[p])),
      max: Math.max(...samples.map((s) => s[p])),
      slope,
      limit,
      ok: last[p] <= limit,
    };
  });
  const notifiesSent = aStats?.stats.notifies ?? 0;
  const notifiesGot = bStats?.notifications ?? -1;
  // C's notifications also count on B (C sends them too): B must have at least A's.
  if (notifiesGot < notifiesSent) failures.push(`B received ${notifiesGot} notifications, A had ${notifiesSent} acknowledged`);
  const aFailures = aStats?.stats.failures ?? NaN;
  const pass = failures.length === 0 && aFailures === 0 && churnFailures === 0 && verdicts.every((v) => v.ok) && (aStats?.stats.transfers ?? 0) > 0;
  const lines = [
    `soak report (mooncake-tcp, loopback)`,
    `  duration            ${seconds.toFixed(0)} s (${minutes} min requested; RSS "start" = after ${warmupMs / 1000} s warm-up)`,
    `  A -> B transfers    ${aStats?.stats.transfers} requests, ${(aStats?.stats.bytes / 1e9).toFixed(2)} GB written and read back, every byte compared; ${aFailures} failed ${JSON.stringify(aStats?.stats.failureCodes ?? {})}`,
    `  A reconnects        ${aStats?.stats.reconnects} (segment forgotten, descriptor fetched and lanes reconnected)`,
    `  notifications       ${notifiesSent} acknowledged to A, ${notifiesGot} received by B (A's and C's)`,
    `  churn peer C        ${churnRestarts} incarnations (${churnKills} SIGKILLed mid-transfer, ${churnRestarts - churnKills} closed), ${churnTransfers} requests, ${(churnBytes / 1e9).toFixed(2)} GB verified, ${churnFailures} failed while alive`,
    `  hostile             ${Object.entries(hostile)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
    ...Object.entries(held).map(
      ([k, h]) =>
        `  held ${k.padEnd(18)} closed by B ${h.closedByServer} (longest ${(h.longestMs / 1000).toFixed(1)} s); still open at the end ${stillOpen[k]?.count ?? 0} (oldest ${((stillOpen[k]?.oldestMs ?? 0) / 1000).toFixed(1)} s); dropped by us ${h.droppedByUs}${Object.keys(h.answers).length ? `; answered ${JSON.stringify(h.answers)}` : ''}`,
    ),
    `  control replies     ${controlAnswered} answers to ${controlWithId} malformed control messages that carry an id (${(hostile['zmq-malformed'] ?? 0) - controlWithId} more were random bytes)`,
    ...verdicts.map(
      (v) =>
        `  RSS ${v.p}               start ${mib(v.start)} MiB, end ${mib(v.end)} MiB (min ${mib(v.min)}, max ${mib(v.max)}, trend ${v.slope.toFixed(2)} MiB/min; first sample ${mib(first[v.p])}); limit ${mib(v.limit)} MiB (+${tolPct}% or +${tolMiB} MiB) -> ${v.ok ? 'flat' : 'GREW'}`,
    ),
    ...failures.slice(0, 20).map((f) => `  failure: ${f}`),
    failures.length > 20 ? `  ... ${failures.length - 20} more failures` : '',
    `  result              ${pass ? 'PASS' : 'FAIL'}`,
  ].filter(Boolean);
  console.log(lines.join('\n'));
  if (values.json)
    writeFileSync(
      values.json,
      JSON.stringify(
        {
          seconds,
          a: aStats,
          b: bStats,
          churn: { churnRestarts, churnKills, churnTransfers, churnBytes, churnFailures },
          hostile,
          held,
          closedByServer,
          stillOpen,
          controlAnswered,
          samples,
          verdicts,
          failures,
          pass,
        },
        null,
        2,
      ),
    );
  process.exit(pass ? 0 : 1);
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}
