import { randomBytes } from 'node:crypto';
import { HttpError, postJson, serveJson } from './http.js';
import type { ChatRequest } from './model.js';

export interface Workers {
  encoder: string;
  prefill: string;
  decode: string;
  /** The prefill instance's bootstrap server (handed to both sides with a room). */
  bootstrap: { host: string; port: number };
}

export interface Timings {
  encodeMs: number;
  ecMs: number;
  prefillMs: number;
  kvMs: number;
  firstTokenMs: number;
  totalMs: number;
  bytes: number;
}

interface OpenAIMessage {
  role: string;
  content: string | { type: string; text?: string; image_url?: { url: string } }[];
}

/** OpenAI-style chat request → the pipeline's view (text and image URLs). */
export function parseChat(body: { messages?: OpenAIMessage[] }, id: string): ChatRequest {
  if (!body || !Array.isArray(body.messages) || body.messages.length === 0) throw new HttpError(400, 'Expected `messages` to be a non-empty array');
  let text = '';
  const images: string[] = [];
  for (const m of body.messages) {
    if (typeof m !== 'object' || m === null) throw new HttpError(400, 'Expected every message to be an object with `content`');
    if (typeof m.content === 'string') text += m.content;
    else if (Array.isArray(m.content)) {
      for (const part of m.content) {
        if (typeof part !== 'object' || part === null) throw new HttpError(400, `unsupported content part ${JSON.stringify(part)}`);
        if (part.type === 'text' && typeof part.text === 'string') text += part.text;
        else if (part.type === 'image_url' && typeof part.image_url?.url === 'string') images.push(part.image_url.url);
        else throw new HttpError(400, `unsupported content part ${JSON.stringify(part).slice(0, 80)}`);
      }
    } else throw new HttpError(400, 'Expected message content to be a string or an array of parts');
  }
  return { id, text, images };
}

function randomRoom(): string {
  return (randomBytes(8).readBigUInt64LE() & ((1n << 63n) - 1n)).toString();
}

/**
 * The EPD proxy: `POST /v1/chat/completions` sends the images to the encoder, then the
 * request with its ec_transfer_params to the prefill and (at once) to the decode, both
 * with the prefill's bootstrap address and a fresh room, as SGLang's router does;
 * `GET /v1/disagg/route` hands out that triple.
 */
export async function startProxy(w: Workers) {
  let next = 1;
  return serveJson({
    'GET /health': async () => ({ ok: true }),
    'GET /v1/disagg/route': async () => ({ bootstrap_host: w.bootstrap.host, bootstrap_port: w.bootstrap.port, bootstrap_room: randomRoom() }),
    'POST /v1/chat/completions': async (body) => {
      const id = `chatcmpl-${next++}`;
      const request = parseChat(body, id);
      const t0 = performance.now();
      let enc: { ec_transfer_params: Record<string, unknown>; encodeMs: number };
      try {
        enc = request.images.length ? await postJson(`${w.encoder}/encode`, { images: request.images }) : { ec_transfer_params: {}, encodeMs: 0 };
      } catch (e) {
        throw new HttpError(502, `encoder: ${(e as Error).message}`);
      }
      const room = randomRoom();
      const [pre, dec] = await Promise.all([
        postJson<{ first_token: number; ecMs: number; prefillMs: number; kvTailMs: number }>(`${w.prefill}/prefill`, {
          request,
          ec_transfer_params: enc.ec_transfer_params,
          bootstrap_room: room,
        }).then((r) => ({ ...r, at: performance.now() })),
        postJson<{ verified: boolean; mismatch: string | null; kvMs: number; bytes: number; first_token: number }>(`${w.decode}/decode`, {
          request,
          bootstrap: { ...w.bootstrap, room },
        }),
      ]).catch((e: Error) => {
        throw new HttpError(502, e.message);
      });
      const timings: Timings = {
        encodeMs: enc.encodeMs,
        ecMs: pre.ecMs,
        prefillMs: pre.prefillMs,
        kvMs: pre.kvTailMs,
        firstTokenMs: pre.at - t0,
        totalMs: performance.now() - t0,
        bytes: dec.bytes,
      };
      return {
        id,
        object: 'chat.completion',
        model: 'te-synthetic',
        choices: [{ index: 0, message: { role: 'assistant', content: `<token ${dec.first_token}>` }, finish_reason: 'length' }],
        usage: { prompt_tokens: null, completion_tokens: 1 },
        te: { timings, verified: dec.verified && dec.first_token === pre.first_token, mismatch: dec.mismatch, room },
      };
    },
  });
}
