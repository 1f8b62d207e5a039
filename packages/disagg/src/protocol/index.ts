export {
  MSG,
  PD_PROTOCOL_VERSION,
  type RegisterMessage,
  type RequestMessage,
  type StatusMessage,
  type AbortMessage,
  type AbortReply,
  AbortReplySchema,
} from './messages.js';
export { handleMessage, checkReply, matchesReply } from './handle.js';
