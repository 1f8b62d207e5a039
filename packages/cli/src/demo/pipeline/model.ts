import { createHash } from 'node:crypto';

/**
 * A synthetic, deterministic multimodal model: no weights, but every byte it produces is
 * a function of the request's content, so any process can recompute what another one
 * computed and check it byte for byte. Compute time is simulated by a real busy wait.
 */
export interface ModelSpec {
  layers: number;
  /** Text tokens per request (before image tokens). */
  tokens: number;
  /** Tokens one image becomes. */
  imageTokens: number;
  /** Embedding width (bf16 elements per image token). */
  hidden: number;
  /** KV heads × head dim × bf16 per token per layer, for K and for V. */
  heads: number;
  headDim: number;
  pageSize: number;
  /** Simulated compute per prefill layer and per encoded image (busy wait, ms). */
  layerMs: number;
  encodeMs: number;
}

export interface ChatRequest {
  id: string;
  text: string;
  images: string[];
}

export function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** The content hash an image is cached under (vLLM's mm_hash). */
export function mmHashOf(imageUrl: string): string {
  return sha256(`image:${imageUrl}`);
}

/** Spins for `ms`: the CPU is really busy, as a kernel launch loop would keep it. */
export function busyWait(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    /* compute */
  }
}

export function embeddingBytes(m: ModelSpec): number {
  return m.imageTokens * m.hidden * 2;
}

/** The encoder: one image's embedding (imageTokens × hidden bf16), from its content hash. */
export function encode(m: ModelSpec, mmHash: string): Uint8Array {
  const out = new Uint8Array(embeddingBytes(m));
  // Whole words where they fit, then the odd tail bytes (any --hidden × --image-tokens).
  const w = new Uint32Array(out.buffer, 0, out.byteLength >>> 2);
  const seed = Number.parseInt(mmHash.slice(0, 8), 16) >>> 0;
  for (let i = 0; i < w.length; i++) w[i] = Math.imul(i + 1, 2654435761) ^ seed;
  for (let i = w.length * 4; i < out.length; i++) out[i] = (seed >>> ((i & 3) * 8)) ^ i;
  return out;
}

/** FNV-1a over every byte of one embedding row: any changed byte changes the row's token seed. */
function rowDigest(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) h = Math.imul(h ^ bytes[i]!, 16777619);
  return h >>> 0;
}

export function tokenCount(m: ModelSpec, r: ChatRequest): number {
  return m.tokens + r.images.length * m.imageTokens;
}

/**
 * The seed of every token: text tokens from the text, image tokens from every byte of
 * their embedding rows, so the KV depends on the embeddings the prefill actually used and
 * the decode's check of the KV also checks every embedding byte the EC transfer moved.
 */
export function tokenSeeds(m: ModelSpec, r: ChatRequest, embeddings: Map<string, Uint8Array>): Uint32Array {
  const seeds = new Uint32Array(tokenCount(m, r));
  const textSeed = Number.parseInt(sha256(r.text).slice(0, 8), 16) >>> 0;
  for (let t = 0; t < m.tokens; t++) seeds[t] = Math.imul(textSeed ^ t, 2246822519) >>> 0;
  r.images.forEach((url, k) => {
    const e = embeddings.get(mmHashOf(url));
    if (!e) throw new Error(`no embedding for image ${k} of ${r.id}`);
    const row = m.hidden * 2;
    for (let j = 0; j < m.imageTokens; j++) seeds[m.tokens + k * m.imageTokens + j] = (rowDigest(e.subarray(j * row, (j + 1) * row)) ^ k) >>> 0;
  });
  return seeds;
}

export function rowBytes(m: Pick<ModelSpec, 'heads' | 'headDim'>): number {
  return m.heads * m.headDim * 2;
}

/** Writes layer `layer`'s K (half 0) or V (half 1) rows of tokens [0, n) into `out` (n × rowBytes). */
export function fillKv(m: ModelSpec, seeds: Uint32Array, layer: number, half: number, out: Uint8Array): void {
  const row = rowBytes(m) >>> 2;
  const w = new Uint32Array(out.buffer, out.byteOffset, out.byteLength >>> 2);
  const mix = Math.imul(layer + 1, 0x9e3779b1) ^ Math.imul(half + 1, 0x85ebca6b);
  for (let t = 0; t < seeds.length; t++) {
    const s = seeds[t]! ^ mix;
    for (let i = 0; i < row; i++) w[t * row + i] = Math.imul(s, i + 1) ^ i;
  }
}

/** The first generated token: a function of every token seed and the last layer. */
export function firstToken(seeds: Uint32Array): number {
  let h = 0x811c9dc5;
  for (const s of seeds) h = Math.imul(h ^ s, 16777619);
  return (h >>> 0) % 32_000;
}
