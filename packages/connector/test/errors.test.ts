import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { NATIVE_STATUS, TransferError, codeForStatus, isTransferError, statusForCode } from '../src/index.js';

test('every native status maps to its code and back', () => {
  for (const [code, status] of Object.entries(NATIVE_STATUS)) {
    assert.is(codeForStatus(status), code);
    assert.is(statusForCode(code as keyof typeof NATIVE_STATUS), status);
  }
});

test('statuses are unique and grouped by range', () => {
  const values = Object.values(NATIVE_STATUS);
  assert.is(new Set(values).size, values.length);
  assert.ok(values.every((v) => v <= 0 && v > -400));
});

test('an unknown native status becomes INTERNAL, never a bare number', () => {
  const e = TransferError.fromStatus(-9999, 'boom', { plugin: 'x' });
  assert.is(e.code, 'INTERNAL');
  assert.is(e.status, -9999);
  assert.is(e.plugin, 'x');
  assert.match(e.message, /^\[x\] boom/);
});

test('fromStatus keeps the native status, code and cause', () => {
  const cause = new Error('inner');
  const e = TransferError.fromStatus(NATIVE_STATUS.AUTH_FAILED, 'refused', { cause });
  assert.is(e.code, 'AUTH_FAILED');
  assert.is(e.status, -102);
  assert.is(e.cause, cause);
  assert.ok(e instanceof Error);
  assert.ok(isTransferError(e, 'AUTH_FAILED'));
  assert.not.ok(isTransferError(e, 'TIMEOUT'));
});

test('instanceof holds for an error built by another copy of the class', () => {
  // What a CJS copy of the package produces: an Error carrying the shared brand.
  const foreign = Object.assign(new Error('x'), { code: 'TIMEOUT' });
  Object.defineProperty(foreign, Symbol.for('te.TransferError'), { value: true });
  assert.ok(foreign instanceof TransferError);
  assert.not.ok(new Error('plain') instanceof TransferError);
  assert.not.ok((null as unknown) instanceof TransferError);
});

test.run();
