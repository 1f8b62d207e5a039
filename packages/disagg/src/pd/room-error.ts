import { TransferError, isTransferError } from '@te/connector';

/**
 * The error a room fails with, naming the room (`details.room`, and the message): every
 * failure a sender or receiver reports says which request it ends, whichever layer raised
 * it (a bootstrap lookup, a registration, a planner, a transport).
 */
export function withRoom(error: TransferError, room: bigint): TransferError {
  if (error.details?.room === room) return error;
  const message = error.message.includes(`room ${room}`) ? error.message : `room ${room}: ${error.message}`;
  return new TransferError(error.code, message, { cause: error, ...(error.statuses ? { statuses: error.statuses } : {}), details: { ...error.details, room } });
}

/** What a room's check threw, as a TransferError: itself, or INTERNAL naming the room. */
export function roomError(e: unknown, room: bigint): TransferError {
  if (isTransferError(e)) return e;
  return new TransferError('INTERNAL', `room ${room}: ${(e as Error).message}`, { cause: e, details: { room } });
}
