// Errors across the fork boundary of the CLI's worker processes (the demo's workers, `te bench
// pd`'s ranks). A child sends its error's message and code; the parent raises a TransferError
// with that code, so `te` ends with the code of what failed ([PLUGIN_UNKNOWN],
// [PEER_UNREACHABLE], ...), not a generic one.
import { TransferError, isTransferErrorCode } from '@te/connector';

/** An error as a child process sends it over IPC. */
export interface SentError {
  message: string;
  code?: string;
}

/** What a child sends for `error`: its message, and its code when it has one. */
export function sentError(error: unknown): SentError {
  const e = error as { message?: unknown; code?: unknown } | undefined;
  const message = typeof e?.message === 'string' ? e.message : String(error);
  return typeof e?.code === 'string' ? { message, code: e.code } : { message };
}

/**
 * The parent's error for what a child sent: `what` (which process, doing what) and the child's
 * message, with the child's code where it is one of te's, else `fallback`.
 */
export function errorFromChild(what: string, sent: SentError | undefined, fallback: 'INTERNAL' | 'TRANSFER_FAILED' = 'INTERNAL'): TransferError {
  const sentCode = sent?.code;
  return new TransferError(isTransferErrorCode(sentCode) ? sentCode : fallback, `${what}: ${sent?.message ?? 'no reason given'}`);
}

/**
 * A child's last act when it cannot start: it sends `{ ready: false, error }` to its parent and
 * exits with 1 once the message is written. Exiting at once can drop the message, and the
 * parent then reports an exit without the reason.
 */
export function exitWithStartFailure(error: unknown): void {
  // Exit status 1 even if the process ends before the send's callback runs.
  process.exitCode = 1;
  const exit = (): never => process.exit(1);
  if (process.send) process.send({ ready: false, error: sentError(error) }, exit);
  else exit();
}
