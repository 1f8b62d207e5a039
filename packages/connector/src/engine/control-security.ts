import { createHmac, createPrivateKey, createPublicKey } from 'node:crypto';
import { curveKeyPair } from 'zeromq';

/**
 * CURVE keys of the control plane, derived from the shared `secret`. Every process that
 * holds the secret derives the same server key pair, so a client can only complete the
 * CURVE handshake with a control endpoint (and read its descriptors, addresses and keys)
 * when it holds the secret too: the server's public key is never sent on the wire, it is
 * computed. Traffic is then encrypted and authenticated by CurveZMQ.
 */
export interface ControlKeys {
  server: { publicKey: string; secretKey: string };
  /** Clients use a fresh key pair each: CURVE needs one, the secret is what authenticates. */
  client(): { publicKey: string; secretKey: string };
}

const Z85 = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#';

function z85(bytes: Uint8Array): string {
  let out = '';
  for (let i = 0; i < bytes.length; i += 4) {
    let v = ((bytes[i]! << 24) >>> 0) + (bytes[i + 1]! << 16) + (bytes[i + 2]! << 8) + bytes[i + 3]!;
    const chunk: string[] = [];
    for (let k = 0; k < 5; k++) {
      chunk.unshift(Z85[v % 85]!);
      v = Math.floor(v / 85);
    }
    out += chunk.join('');
  }
  return out;
}

export function controlKeys(secret: string): ControlKeys {
  // The X25519 secret key is a keyed hash of the shared secret (the curve clamps it).
  const seed = createHmac('sha256', secret).update('te control-plane server key v1').digest();
  return {
    server: { secretKey: z85(seed), publicKey: z85(Buffer.from(publicOf(seed), 'base64url')) },
    client: () => curveKeyPair(),
  };
}

/** The X25519 public key (base64url) of a raw 32-byte secret key. */
function publicOf(seed: Buffer): string {
  // Node derives the public half when given a PKCS#8 key with only the private part.
  const pkcs8 = Buffer.concat([Buffer.from('302e020100300506032b656e04220420', 'hex'), seed]);
  const key = createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' });
  return (createPublicKey(key).export({ format: 'jwk' }) as { x: string }).x;
}
