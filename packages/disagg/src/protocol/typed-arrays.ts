import { Kind, Type, TypeRegistry, type TSchema, type TUnsafe } from '@sinclair/typebox';

// Index and address lists cross the control plane as binary typed arrays (msgpack
// extension types), never as arrays of numbers: a request can carry 10^5 page indices.
TypeRegistry.Set('TeUint32Array', (_schema, value) => value instanceof Uint32Array);
TypeRegistry.Set('TeBigUint64Array', (_schema, value) => value instanceof BigUint64Array);

export const Uint32ArrayType = (options: { maxItems?: number } = {}): TUnsafe<Uint32Array> => Type.Unsafe<Uint32Array>({ [Kind]: 'TeUint32Array', ...options });

export const BigUint64ArrayType = (): TUnsafe<BigUint64Array> => Type.Unsafe<BigUint64Array>({ [Kind]: 'TeBigUint64Array' });

export function maxItemsOf(schema: TSchema): number | undefined {
  return (schema as { maxItems?: number }).maxItems;
}
