// The chaos soak's report: its counters, the checks of every process once the load
// drained (tables empty, RSS and descriptors near their baseline, restarted ones serving),
// and how it is printed.

/** The counters a run fills in. */
export function newReport({ seed, netns, checksums }) {
  return {
    seed,
    durationS: 0,
    roomsStarted: 0,
    roomsCompleted: 0,
    roomsFailed: 0,
    failedByCause: {},
    rankOutcomesLostToKills: 0,
    successUndelivered: 0,
    abortedAfterPrefillSuccess: 0,
    faultsInjected: 0,
    faultsByKind: {},
    abortsInjected: { decode: 0, prefill: 0 },
    layerwiseRooms: 0,
    chunkedRooms: 0,
    ec: { items: 0, loaded: 0, failed: 0, failedByCause: {}, wrongBytes: 0 },
    latencyMs: { p50: 0, p99: 0, max: 0 },
    wrongBytes: 0,
    invariantViolations: 0,
    violations: [],
    quarantinedPages: 0,
    restartsRetriedForPort: 0,
    processesMeasured: 0,
    nonSocketFdGrowth: 0,
    rssGrowthMiB: 0,
    fdGrowth: 0,
    tablesAfterLoad: {},
    netns,
    checksums,
  };
}

/**
 * Checks each process's sample taken after the drain (`end`, by process): its tables are
 * empty and no room status moved after it ended; its RSS and descriptors grew little
 * against a baseline of the same life; a process restarted early enough served a room
 * again. Fills in the growth figures; each broken check goes to `violation`.
 */
export function checkAfterLoad({ procs, end, report, violation, loadEnd, tRun }) {
  let rss = 0;
  let fd = 0;
  let otherFd = 0;
  for (const p of procs) {
    const s = end.get(p);
    if (!s) {
      violation(`${p.name} did not answer after the load (${p.state})`);
      continue;
    }
    if (s.tables.movedAfterEnd) violation(`${p.name}: ${s.tables.movedAfterEnd} room statuses moved after they ended`);
    for (const t of ['live', 'senders', 'pending', 'aborted', 'receivers'])
      if (s.tables[t]) violation(`${p.name}: table ${t} holds ${s.tables[t]} entries after the load`);
    report.tablesAfterLoad[p.name] = s.tables;
    // Growth against a baseline of the same life (taken after the warm-up, or a while after
    // the process's last restart). Sockets follow which peers are up (they restart too):
    // for a process that ever restarted only its other descriptors are held to the baseline.
    if (p.baseline) {
      report.processesMeasured++;
      const grow = (s.rss - p.baseline.rss) / 2 ** 20;
      rss = Math.max(rss, grow);
      const other = s.fds - s.socketFds - (p.baseline.fds - p.baseline.socketFds);
      otherFd = Math.max(otherFd, other);
      if (grow > Math.max(48, (0.25 * p.baseline.rss) / 2 ** 20)) violation(`${p.name}: RSS grew ${grow.toFixed(1)} MiB over the run`);
      if (other > 2) violation(`${p.name}: ${other} more open descriptors (not sockets) than at its baseline`);
      if (!p.restartedAt) {
        fd = Math.max(fd, s.fds - p.baseline.fds);
        if (s.fds - p.baseline.fds > 4) violation(`${p.name}: ${s.fds - p.baseline.fds} more open descriptors than at the baseline`);
      }
    }
    // A restarted rank or server serves again (when it came back early enough to be routed rooms).
    if (p.restartedAt && p.restartedAt < loadEnd - 15_000 && p.lastSuccessAt < p.restartedAt)
      violation(`${p.name} restarted at ${((p.restartedAt - tRun) / 1000).toFixed(0)} s of load and served no room after`);
  }
  report.rssGrowthMiB = Number(rss.toFixed(1));
  report.fdGrowth = fd;
  report.nonSocketFdGrowth = otherFd;
}

/** p50, p99 and max of the rooms' latencies (sorted in place). */
export function latencySummary(latencies) {
  latencies.sort((a, b) => a - b);
  const q = (x) => latencies[Math.min(latencies.length - 1, Math.floor(x * latencies.length))] ?? 0;
  return { p50: q(0.5), p99: q(0.99), max: latencies.at(-1) ?? 0 };
}

/** The report as lines of text, then, with `json`, as one line of JSON. */
export function printReport(r, json) {
  console.log(`chaos soak, seed ${r.seed}: ${r.loadS} s of load, ${r.durationS} s in all${r.netns ? '' : ' (no network namespace: no slowed link)'}`);
  console.log(
    `rooms: ${r.roomsStarted} started, ${r.roomsCompleted} completed, ${r.roomsFailed} failed ${JSON.stringify(r.failedByCause)}; ${r.layerwiseRooms} layerwise, ${r.chunkedRooms} chunked`,
  );
  console.log(`room latency (decode, Success): p50 ${r.latencyMs.p50} ms, p99 ${r.latencyMs.p99} ms, max ${r.latencyMs.max} ms`);
  console.log(
    `faults: ${r.faultsInjected} ${JSON.stringify(r.faultsByKind)}; rank outcomes lost to kills: ${r.rankOutcomesLostToKills}; decode Success the prefill could not deliver (documented): ${r.successUndelivered}; decode aborts after the prefill's Success: ${r.abortedAfterPrefillSuccess}`,
  );
  console.log(`EC: ${r.ec.items} items, ${r.ec.loaded} loaded, ${r.ec.failed} failed ${JSON.stringify(r.ec.failedByCause)}`);
  if (r.restartsRetriedForPort) console.log(`restarts retried because the control port was still taken: ${r.restartsRetriedForPort}`);
  console.log(
    `wrong bytes: ${r.wrongBytes}; quarantined pages (pagesMayBeWritten): ${r.quarantinedPages}; RSS growth (max per process, ${r.processesMeasured} processes measured): ${r.rssGrowthMiB} MiB; descriptor growth: ${r.fdGrowth} (never-restarted processes), ${r.nonSocketFdGrowth} not sockets (all measured)`,
  );
  console.log(`invariant violations: ${r.invariantViolations}`);
  for (const v of r.violations) console.log(`  - ${v}`);
  console.log(r.invariantViolations === 0 ? 'PASS' : 'FAIL');
  if (json) console.log(JSON.stringify(r));
}
