/**
 * Which prefill ranks a decode rank receives from, and how many decode ranks a prefill
 * rank hears from per request (SGLang's rank-mapping rules, as pure functions).
 */
export interface PrefillShape {
  tpSize: number;
  ppSize: number;
  dpSize: number;
}

export interface DecodeRankShape {
  tpSize: number;
  tpRank: number;
  ppSize: number;
  ppRank: number;
}

export interface RankTargets {
  /** Prefill attention-TP ranks this decode rank receives from. */
  readonly tpRanks: Int32Array;
  /** Prefill PP stages it receives from (its own stage, or every stage when decode PP is 1). */
  readonly ppRanks: Int32Array;
  /** Decode ranks each prefill rank waits for before it may send a request's KV. */
  readonly decodeRanksPerPrefillRank: number;
}

function assertDivisible(a: number, b: number, what: string): void {
  if (a % b !== 0) throw new RangeError(`${what}: ${a} is not a multiple of ${b}`);
}

// The helpers are public, so a size of 0, a negative rank or a rank past its group is refused
// here by name: left through, each one yields a rank list that looks valid and is not.
function assertSize(value: number, what: string): void {
  if (!Number.isInteger(value) || value < 1) throw new RangeError(`${what} must be a positive integer, got ${String(value)}`);
}

function assertRank(value: number, size: number, what: string): void {
  if (!Number.isInteger(value) || value < 0 || value >= size) throw new RangeError(`${what} ${String(value)} is outside [0, ${size})`);
}

export function targetPrefillTpRanks(prefillTp: number, decodeTp: number, decodeRank: number): Int32Array {
  assertSize(prefillTp, 'prefill TP size');
  assertSize(decodeTp, 'decode TP size');
  assertRank(decodeRank, decodeTp, 'decode TP rank');
  if (prefillTp === decodeTp) return Int32Array.of(decodeRank);
  if (decodeTp > prefillTp) {
    assertDivisible(decodeTp, prefillTp, 'decode TP must be a multiple of prefill TP');
    return Int32Array.of(Math.floor(decodeRank / (decodeTp / prefillTp)));
  }
  assertDivisible(prefillTp, decodeTp, 'prefill TP must be a multiple of decode TP');
  const per = prefillTp / decodeTp;
  return Int32Array.from({ length: per }, (_, i) => decodeRank * per + i);
}

export function targetPrefillPpRanks(prefillPp: number, decodePp: number, decodePpRank: number): Int32Array {
  assertSize(prefillPp, 'prefill PP size');
  assertSize(decodePp, 'decode PP size');
  assertRank(decodePpRank, decodePp, 'decode PP rank');
  if (decodePp === 1) return Int32Array.from({ length: prefillPp }, (_, i) => i);
  if (decodePp !== prefillPp) throw new RangeError(`decode PP size must equal prefill PP size (${prefillPp}) or be 1, got ${decodePp}`);
  return Int32Array.of(decodePpRank);
}

export function resolveRankTargets(prefill: PrefillShape, decode: DecodeRankShape): RankTargets {
  if (typeof prefill !== 'object' || prefill === null) throw new RangeError(`the prefill shape must be an object, got ${String(prefill)}`);
  if (typeof decode !== 'object' || decode === null) throw new RangeError(`the decode rank's shape must be an object, got ${String(decode)}`);
  return {
    tpRanks: targetPrefillTpRanks(prefill.tpSize, decode.tpSize, decode.tpRank),
    ppRanks: targetPrefillPpRanks(prefill.ppSize, decode.ppSize, decode.ppRank),
    decodeRanksPerPrefillRank: decode.tpSize > prefill.tpSize ? decode.tpSize / prefill.tpSize : 1,
  };
}

/** The prefill DP group serving a request: the router's choice, or `room % dpSize`. */
export function prefillDpRankFor(room: bigint, dpSize: number, chosen?: number): number {
  assertSize(dpSize, 'prefill DP size');
  if (chosen !== undefined) {
    assertRank(chosen, dpSize, 'prefill DP rank');
    return chosen;
  }
  if (typeof room !== 'bigint' || room < 0n) throw new RangeError(`a bootstrap room must be a non-negative bigint, got ${typeof room} ${String(room)}`);
  return Number(room % BigInt(dpSize));
}
