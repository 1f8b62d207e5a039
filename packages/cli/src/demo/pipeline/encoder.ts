import { isTransferError, type TransferEngine } from '@te/connector';
import { createECProducer } from '@te/disagg';
import { HttpError, serveJson } from './http.js';
import { busyWait, encode, mmHashOf, type ModelSpec } from './model.js';

/** The encoder worker: encodes each new image once, keeps it in the EC transfer pool, returns ec_transfer_params. */
export async function startEncoder(engine: TransferEngine, m: ModelSpec, poolBytes: number, host = '127.0.0.1') {
  const producer = await createECProducer({ engine, poolBytes });
  let encoded = 0;
  let reused = 0;
  let notPooled = 0;
  const { server, port } = await serveJson(
    {
      'POST /encode': async (body: { images: string[] }) => {
        const started = performance.now();
        const hashes: string[] = [];
        for (const url of body.images) {
          const hash = mmHashOf(url);
          hashes.push(hash);
          if (url.includes('fail-encoder')) throw new HttpError(500, `the encoder failed on image ${url}`);
          if (producer.has(hash)) {
            reused++;
            continue;
          }
          busyWait(m.encodeMs);
          encoded++;
          try {
            await producer.save(hash, encode(m, hash), { dtype: 'bf16', shape: [m.imageTokens, m.hidden] });
          } catch (e) {
            // Every pooled item is being read: this one is not pooled, and the prefill
            // encodes it locally (its params are simply absent), as vLLM's connector does.
            if (!isTransferError(e, 'POOL_EXHAUSTED')) throw e;
            notPooled++;
          }
        }
        return { ec_transfer_params: producer.transferParams(hashes), encodeMs: performance.now() - started };
      },
      'GET /stats': async () => ({ encoded, reused, notPooled, evictions: producer.pool.evictions, pulls: producer.pulls }),
    },
    0,
    host,
  );
  return { port, close: async () => (server.close(), await producer.close()) };
}
