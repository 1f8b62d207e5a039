/**
 * The host's monotonic clock, in ms: the same clock in every process on the machine, so a
 * room's start taken in the runner and its end taken in the decode rank can be subtracted.
 * `performance.timeOrigin + performance.now()` is not that: each process fixes its origin
 * from the wall clock when it starts, and a wall clock stepped or slewed between two
 * processes' starts puts their readings milliseconds apart (a 4 MiB room takes 2-5 ms; CI
 * once saw every room of a run come out negative).
 */
export const monotonicMs = (): number => Number(process.hrtime.bigint()) / 1e6;
