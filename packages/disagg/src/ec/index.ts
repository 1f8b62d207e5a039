export { createECProducer, ECPoolProducer, type ECProducerOptions } from './producer.js';
export { createECConsumer, ECPullConsumer, type ECConsumerOptions } from './consumer.js';
export { TransferPool } from './transfer-pool.js';
export { PoolAllocator, type PoolItem } from './pool-allocator.js';
export { EC_PULL, EC_PROTOCOL_VERSION } from './messages.js';
export { ECConnectorScheduler, ECConnectorWorker, type ECConnectorMeta, type ECRequestView } from './vllm.js';
