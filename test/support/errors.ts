import { GatewayError } from '../../src/errors.ts'

/** The GatewayError `fn` throws; anything else thrown is re-thrown, and throwing nothing fails. */
export function thrownGatewayError(fn: () => unknown): GatewayError {
  try {
    fn()
  } catch (err) {
    if (err instanceof GatewayError) return err
    throw err
  }
  throw new Error('expected a GatewayError')
}
