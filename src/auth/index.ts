// Every credential check of the gateway, one file per credential:
//   keys.ts             account keys (inference and management): bearer or x-api-key, roles, allowed models
//   admin-key.ts        the operator's admin key (admin API, operator routes, /metrics)
//   output-url.ts       signed output URLs (no bearer header: the signature is the authorisation)
//   session-token.ts    the console session token, pure: sign, verify, CSRF token, cookie
//   console-session.ts  console sessions: sign-in with a key, the cookie as a credential, sign-out
// Outbound webhook signing is not a credential check of ours: predictions/webhook-signing.ts.

export {
  admitKey,
  assertModelAllowed,
  authenticate,
  authenticateApiKey,
  hashKey,
  KEY_PREFIX_LENGTH,
  modelAllowed,
  requireAccountKey,
  type KeyRole,
} from './keys.ts'
export { adminKeyCheck, adminKeyMatcher, requireAdminKey, requireOperator } from './admin-key.ts'
export {
  assertOutputSignature,
  checkOutputSignature,
  newSigningKey,
  outputUrl,
  signOutput,
  type OutputUrlCheck,
} from './output-url.ts'
export {
  checkSession,
  csrfToken,
  isCsrfToken,
  readCookie,
  signSession,
  verifySession,
  type SessionClaims,
  type SessionRole,
} from './session-token.ts'
export {
  createConsoleSessions,
  CSRF_HEADER,
  deriveSessionSecret,
  SESSION_COOKIE,
  type ConsoleSessions,
  type ConsoleSessionsOptions,
  type SessionFound,
  type SignedIn,
} from './console-session.ts'
