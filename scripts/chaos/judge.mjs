// The chaos soak's verdict on one room, from how it ended on each rank (pure, so the
// verifier test can show each check failing). `ps`/`ds`: the outcomes of the prefill and
// decode ranks, index = attention TP rank (equal TP: prefill rank r writes decode rank r),
// undefined for a rank that died during the room.

/**
 * @returns {{ violations: string[], wrongBytes: number, succeeded: boolean, cause: string | undefined,
 *   successUndelivered: number, abortedAfterPrefillSuccess: number }}
 */
export function judgeRoom({ key, pNames, dNames, ps, ds, abortSide, roomEndMs }) {
  const out = { violations: [], wrongBytes: 0, succeeded: false, cause: undefined, successUndelivered: 0, abortedAfterPrefillSuccess: 0 };
  const all = [...ps.map((o, i) => [pNames[i], o]), ...ds.map((o, i) => [dNames[i], o])];
  for (const [who, o] of all) {
    if (!o) continue;
    if (o.code === 'NOT_ENDED' || (o.status !== 4 && o.status !== 0))
      out.violations.push(`room ${key} did not end on ${who} within ${roomEndMs} ms (status ${o.status})`);
    else if (o.status === 0 && o.room !== key) out.violations.push(`room ${key}: failure on ${who} without details.room (${o.code}: ${o.message})`);
    // No fault of the soak corrupts bytes: a checksum mismatch is a corruption or a false positive.
    if (o.status === 0 && o.code === 'DATA_CORRUPTED') out.violations.push(`room ${key}: DATA_CORRUPTED on ${who} (${o.message})`);
    if (o.wrong) {
      out.wrongBytes += o.wrong;
      out.violations.push(`room ${key}: ${o.wrong} wrong bytes on ${who} after Success`);
    }
  }
  for (let r = 0; r < Math.min(ps.length, ds.length); r++) {
    const p = ps[r];
    const d = ds[r];
    if (!p || !d) continue;
    if (p.status === 4 && d.status === 0) {
      // The decode's own abort() after the prefill finished: its answer says Success (inherent).
      if (abortSide === 'decode' && d.code === 'ABORTED') out.abortedAfterPrefillSuccess++;
      else out.violations.push(`room ${key}: ${pNames[r]} Success but ${dNames[r]} Failed (${d.code}: ${d.message})`);
    }
    if (p.status === 0 && d.status === 4) {
      // Documented: the decode recorded Success but never answered the report (it was stopped).
      if (p.code === 'PEER_FAILED' && /could not be delivered/.test(p.message)) out.successUndelivered++;
      else out.violations.push(`room ${key}: ${dNames[r]} Success but ${pNames[r]} Failed (${p.code}: ${p.message})`);
    }
  }
  out.succeeded = ds.length > 0 && ds.every((d) => d?.status === 4);
  if (!out.succeeded) {
    const first = ds.find((d) => d && d.status === 0) ?? ps.find((p) => p && p.status === 0);
    out.cause = first ? first.code : 'RANK_KILLED';
  }
  return out;
}
