/**
 * Ports that fetch refuses to connect to (the Fetch standard's "bad ports"; Node's fetch
 * implements the list). Bootstrap clients talk to the server with fetch, so a server on one
 * of these ports could never be reached: every attempt fails at once with "bad port" and the
 * rooms would wait out their whole bootstrap deadline. Such a port is refused up front.
 */
const BLOCKED = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137,
  139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049,
  3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
]);

/** Why a bootstrap server on `port` cannot be reached, or undefined when it can. */
export function fetchBlockedPort(port: number): string | undefined {
  // Checked here, not left to listen(): Node's ERR_SOCKET_BAD_PORT is a RangeError without a code of te's.
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    return `expected a port number from 0 to 65535, got ${typeof port === 'string' ? JSON.stringify(port) : String(port)}`;
  return BLOCKED.has(port)
    ? `port ${port} is one fetch refuses to connect to (the Fetch standard's bad ports), and bootstrap clients use fetch: choose another port`
    : undefined;
}
