import { chatRequestSchema } from '../schemas/chat.ts'
import { embeddingsRequestSchema } from '../schemas/embeddings.ts'
import { countTokensRequestSchema, messagesRequestSchema } from '../schemas/messages.ts'
import {
  imageInputSchema,
  predictionRequestSchema,
  speechInputSchema,
  videoAInputSchema,
  videoBInputSchema,
  videoCInputSchema,
  videoInputSchema,
} from '../schemas/predictions.ts'
import { responsesRequestSchema } from '../schemas/responses.ts'
import {
  createAccountBody,
  creditsBody,
  discountBody,
  overdraftBody,
  pageQuery,
  rateLimitsBody,
  webhookSecretBody,
} from '../routes/admin.ts'
import { activityQuery, deliveriesQuery, generationsQuery, reportPageQuery } from '../routes/reports.ts'
import { adminCreateKeyBody, createKeyBody, noticesBody, updateKeyBody } from '../schemas/keys.ts'
import { answerSchemas, fromZod, obj, type JsonSchema } from './schemas.ts'

// The OpenAPI 3.1 document of every public route, served at /openapi.json and rendered at /docs.
// test/http/openapi.test.ts validates it with a standard validator, checks that every route the app
// registers has an entry, and checks real answers against the answers' schemas.

export const OPENAPI_VERSION = '3.1.1'

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete'
type Auth = 'key' | 'admin' | 'anthropic' | 'none'

interface Answer {
  description: string
  /** A component schema name, or a schema. */
  schema?: string | JsonSchema
  /** application/json unless said. */
  contentType?: string
  headers?: string[]
}

interface Route {
  method: Method
  path: string
  tag: string
  summary: string
  description?: string
  auth: Auth
  body?: { schema: string; contentType?: string; required?: boolean }
  query?: { name: string; required?: boolean; schema: JsonSchema; description?: string }[]
  headers?: { name: string; description: string }[]
  answers: Record<string, Answer>
  /** The statuses of the error envelope worth naming (4XX and 5XX are always there). */
  errors?: number[]
}

const INFERENCE_HEADERS = [
  'X-Generation-Id',
  'X-Junction-Provider',
  'X-Junction-Deployment',
  'X-Junction-Attempts',
]
const RATE_HEADERS = ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset']
const INFERENCE_ERRORS = [400, 401, 402, 404, 429, 502, 503, 504]

/** Routes that answer server-sent events when the body says `stream: true`: what the events are. */
const STREAMS: Record<string, string> = {
  '/v1/chat/completions': 'data: <ChatCompletionChunk JSON> events, then data: [DONE]',
  '/routed/v1/chat/completions': 'data: <ChatCompletionChunk JSON> events, then data: [DONE]',
  '/v1/responses': 'the typed response.* events of the Responses API',
  '/v1/messages': "Anthropic's Messages stream events",
}

/** A query schema's parameters, as OpenAPI lists them. */
const queryOf = (schema: Parameters<typeof fromZod>[0]): NonNullable<Route['query']> =>
  Object.entries((fromZod(schema).properties ?? {}) as Record<string, JsonSchema>).map(([name, s]) => ({
    name,
    schema: s,
  }))

const ROUTES: Route[] = [
  ...(['/v1/chat/completions', '/routed/v1/chat/completions'] as const).map((path): Route => ({
    method: 'post',
    path,
    tag: 'Chat',
    summary: path.startsWith('/routed') ? 'Chat completion (routed prefix)' : 'Chat completion',
    description:
      'One chat completion. With `stream: true` the answer is server-sent events: one ' +
      '`chat.completion.chunk` per `data:` event, then `data: [DONE]`; an error after the stream ' +
      'started is one `data: {"error": …}` event and no `[DONE]`.',
    auth: 'key',
    body: { schema: 'ChatCompletionRequest' },
    answers: {
      '200': {
        description: 'the completion (JSON), or the stream (text/event-stream) when `stream` is true',
        schema: 'ChatCompletion',
        headers: [...INFERENCE_HEADERS, ...RATE_HEADERS],
      },
    },
    errors: INFERENCE_ERRORS,
  })),
  ...(['/routed/v1/embeddings', '/v1/embeddings'] as const).map((path): Route => ({
    method: 'post',
    path,
    tag: 'Embeddings',
    summary: path.startsWith('/routed') ? 'Embeddings' : 'Embeddings (alias of /routed/v1/embeddings)',
    auth: 'key',
    body: { schema: 'EmbeddingsRequest' },
    answers: {
      '200': {
        description: 'the vectors',
        schema: 'Embeddings',
        headers: [...INFERENCE_HEADERS, ...RATE_HEADERS],
      },
    },
    errors: INFERENCE_ERRORS,
  })),
  {
    method: 'post',
    path: '/v1/responses',
    tag: 'Responses',
    summary: 'Create a response (OpenAI Responses API)',
    description: 'Served by the chat pipeline; with `stream: true`, the typed `response.*` events.',
    auth: 'key',
    body: { schema: 'ResponsesRequest' },
    answers: {
      '200': { description: 'the response, or its events', schema: 'Response', headers: INFERENCE_HEADERS },
    },
    errors: INFERENCE_ERRORS,
  },
  {
    method: 'get',
    path: '/v1/responses/{id}',
    tag: 'Responses',
    summary: 'A stored response',
    auth: 'key',
    answers: { '200': { description: 'the response', schema: 'Response' } },
    errors: [404],
  },
  {
    method: 'delete',
    path: '/v1/responses/{id}',
    tag: 'Responses',
    summary: 'Delete a stored response',
    auth: 'key',
    answers: { '200': { description: 'deleted', schema: 'Deleted' } },
    errors: [404],
  },
  {
    method: 'post',
    path: '/v1/messages',
    tag: 'Messages',
    summary: "Create a message (Anthropic's Messages API)",
    description:
      'Errors come in Anthropic\'s shape (`{"type": "error", "error": {…}}`). With `stream: true`, ' +
      "Anthropic's SSE events.",
    auth: 'anthropic',
    headers: [
      { name: 'anthropic-version', description: 'accepted, e.g. `2023-06-01`' },
      { name: 'anthropic-beta', description: 'accepted; passed to Anthropic deployments' },
    ],
    body: { schema: 'MessagesRequest' },
    answers: {
      '200': {
        description: 'the message, or its events',
        schema: 'AnthropicMessage',
        headers: INFERENCE_HEADERS,
      },
    },
    errors: INFERENCE_ERRORS,
  },
  {
    method: 'post',
    path: '/v1/messages/count_tokens',
    tag: 'Messages',
    summary: 'Count the input tokens of a message',
    description: '`x-junction-token-count: upstream|estimate` says whose count it is.',
    auth: 'anthropic',
    body: { schema: 'CountTokensRequest' },
    answers: {
      '200': { description: 'the count', schema: 'TokenCount', headers: ['X-Junction-Token-Count'] },
    },
    errors: [400, 401, 404],
  },
  {
    method: 'get',
    path: '/v1/models',
    tag: 'Models',
    summary: 'List the models',
    auth: 'key',
    answers: { '200': { description: 'every model this gateway serves', schema: 'ModelList' } },
  },
  {
    method: 'get',
    path: '/routed/v1/models',
    tag: 'Models',
    summary: 'List the models (routed prefix)',
    auth: 'key',
    answers: { '200': { description: 'the same list', schema: 'ModelList' } },
  },
  ...(['/v1/models/{model}', '/routed/v1/models/{model}'] as const).map((path): Route => ({
    method: 'get',
    path,
    tag: 'Models',
    summary: 'One model, by slug or alias',
    description: 'The slug contains a `/` (`openai/gpt-4o`): it is the rest of the path.',
    auth: 'key',
    answers: { '200': { description: 'the model', schema: 'Model' } },
    errors: [404],
  })),
  {
    method: 'post',
    path: '/v1/files',
    tag: 'Files',
    summary: 'Upload a file',
    auth: 'key',
    body: { schema: 'FileUpload', contentType: 'multipart/form-data' },
    answers: { '200': { description: 'the stored file', schema: 'File' } },
    errors: [400, 413, 415],
  },
  {
    method: 'get',
    path: '/v1/files',
    tag: 'Files',
    summary: "List the account's files, newest first",
    auth: 'key',
    query: [
      { name: 'purpose', schema: { type: 'string' } },
      { name: 'limit', schema: { type: 'integer', minimum: 1, maximum: 10000 } },
      { name: 'after', schema: { type: 'string' }, description: 'a file id: the page after it' },
      { name: 'order', schema: { type: 'string', enum: ['asc', 'desc'] } },
    ],
    answers: { '200': { description: 'the files', schema: 'FileList' } },
  },
  {
    method: 'get',
    path: '/v1/files/{id}',
    tag: 'Files',
    summary: 'A file',
    auth: 'key',
    answers: { '200': { description: 'the file object', schema: 'File' } },
    errors: [404],
  },
  {
    method: 'get',
    path: '/v1/files/{id}/content',
    tag: 'Files',
    summary: "A file's bytes",
    auth: 'key',
    answers: {
      '200': {
        description: "the bytes, with the upload's content type",
        contentType: 'application/octet-stream',
        schema: { type: 'string', contentMediaType: 'application/octet-stream' },
      },
    },
    errors: [404],
  },
  {
    method: 'delete',
    path: '/v1/files/{id}',
    tag: 'Files',
    summary: 'Delete a file and its bytes',
    auth: 'key',
    answers: { '200': { description: 'deleted', schema: 'Deleted' } },
    errors: [404],
  },
  {
    method: 'get',
    path: '/v1/credits',
    tag: 'Account',
    summary: "The account's credits",
    auth: 'key',
    answers: { '200': { description: 'credits in USD', schema: 'Credits' } },
  },
  {
    method: 'get',
    path: '/v1/generation',
    tag: 'Account',
    summary: 'One generation: usage and billing',
    auth: 'key',
    query: [
      { name: 'id', required: true, schema: { type: 'string' }, description: 'a generation or task id' },
    ],
    answers: { '200': { description: 'the record', schema: 'Generation' } },
    errors: [400, 404],
  },
  {
    method: 'post',
    path: '/v1/predictions',
    tag: 'Predictions',
    summary: 'Start an image, video or speech task',
    auth: 'key',
    headers: [
      {
        name: 'Idempotency-Key',
        description: 'the same key and body within 24 h answer the first task again; another body is a 409',
      },
    ],
    body: { schema: 'PredictionRequest' },
    answers: {
      '200': { description: 'the task, processing', schema: 'PredictionCreated', headers: RATE_HEADERS },
    },
    errors: [400, 401, 402, 404, 409, 429],
  },
  {
    method: 'get',
    path: '/v1/predictions/{id}',
    tag: 'Predictions',
    summary: 'A task',
    auth: 'key',
    answers: { '200': { description: 'the task', schema: 'Prediction' } },
    errors: [404],
  },
  {
    method: 'post',
    path: '/v1/predictions/{id}/cancel',
    tag: 'Predictions',
    summary: 'Cancel a running task',
    auth: 'key',
    answers: { '200': { description: 'the task, cancelled', schema: 'Prediction' } },
    errors: [404, 409],
  },
  {
    method: 'get',
    path: '/v1/webhooks/secret',
    tag: 'Predictions',
    summary: "The account's webhook signing secret",
    auth: 'key',
    answers: { '200': { description: 'the secret', schema: 'WebhookSecret' } },
  },
  {
    method: 'get',
    path: '/v1/outputs/{id}',
    tag: 'Predictions',
    summary: "A task's output, by its signed URL",
    description: 'No key: the signature is the authorisation. `Range` requests are served.',
    auth: 'none',
    query: [
      { name: 'expires', required: true, schema: { type: 'string' } },
      { name: 'signature', required: true, schema: { type: 'string' } },
    ],
    answers: {
      '200': {
        description: 'the bytes',
        contentType: 'application/octet-stream',
        schema: { type: 'string', contentMediaType: 'application/octet-stream' },
      },
      '206': {
        description: 'the asked range',
        contentType: 'application/octet-stream',
        schema: { type: 'string', contentMediaType: 'application/octet-stream' },
      },
    },
    errors: [403, 404, 416],
  },
  {
    method: 'get',
    path: '/healthz',
    tag: 'Operations',
    summary: 'Liveness',
    auth: 'none',
    answers: { '200': { description: 'the process answers', schema: 'Health' } },
  },
  {
    method: 'get',
    path: '/readyz',
    tag: 'Operations',
    summary: 'Readiness: the store answers and the instance is not draining',
    auth: 'none',
    answers: { '200': { description: 'ready', schema: 'Health' } },
    errors: [503],
  },
  {
    method: 'get',
    path: '/metrics',
    tag: 'Operations',
    summary: 'Prometheus metrics (only with GATEWAY_ADMIN_KEY)',
    auth: 'admin',
    answers: {
      '200': {
        description: 'the text exposition format',
        contentType: 'text/plain',
        schema: { type: 'string' },
      },
    },
    errors: [401],
  },
  {
    method: 'get',
    path: '/v1/key',
    tag: 'Keys',
    summary: 'The calling key: its limit, what is left, its usage and role',
    auth: 'key',
    answers: { '200': { description: 'the key', schema: 'CurrentKey' } },
    errors: [401],
  },
  {
    method: 'get',
    path: '/v1/keys',
    tag: 'Keys',
    summary: "The account's keys (a management key)",
    auth: 'key',
    query: [
      { name: 'offset', schema: { type: 'integer', minimum: 0 } },
      { name: 'limit', schema: { type: 'integer', minimum: 1 } },
      { name: 'include_disabled', schema: { type: 'boolean' } },
    ],
    answers: { '200': { description: 'one page of keys', schema: 'ApiKeyPage' } },
    errors: [400, 401, 403],
  },
  {
    method: 'post',
    path: '/v1/keys',
    tag: 'Keys',
    summary: 'Create a key (a management key); the secret is in this answer only',
    auth: 'key',
    body: { schema: 'CreateKey', required: false },
    answers: { '201': { description: 'the key and its secret', schema: 'ApiKeyCreated' } },
    errors: [400, 401, 403],
  },
  {
    method: 'get',
    path: '/v1/keys/{hash}',
    tag: 'Keys',
    summary: 'One key of the account (a management key)',
    auth: 'key',
    answers: { '200': { description: 'the key', schema: 'ApiKeyData' } },
    errors: [400, 401, 403, 404],
  },
  {
    method: 'patch',
    path: '/v1/keys/{hash}',
    tag: 'Keys',
    summary: "Change a key's settings (a management key); null clears one",
    auth: 'key',
    body: { schema: 'UpdateKey' },
    answers: { '200': { description: 'the key', schema: 'ApiKeyData' } },
    errors: [400, 401, 403, 404],
  },
  {
    method: 'delete',
    path: '/v1/keys/{hash}',
    tag: 'Keys',
    summary: 'Revoke a key (a management key)',
    auth: 'key',
    answers: { '200': { description: 'revoked', schema: obj({ deleted: { type: 'boolean' } }) } },
    errors: [400, 401, 403, 404],
  },
  {
    method: 'get',
    path: '/v1/notices',
    tag: 'Keys',
    summary: "Where and when the account's low-balance notices go (a management key)",
    auth: 'key',
    answers: { '200': { description: 'the notices', schema: 'Notices' } },
    errors: [401, 403],
  },
  {
    method: 'put',
    path: '/v1/notices',
    tag: 'Keys',
    summary: "Set the account's notice URL and low-balance threshold (a management key)",
    auth: 'key',
    body: { schema: 'NoticesRequest' },
    answers: { '200': { description: 'the notices', schema: 'Notices' } },
    errors: [400, 401, 403],
  },
  {
    method: 'get',
    path: '/v1/account',
    tag: 'Account',
    summary: "The caller's account: credits with what is held now, discounts and rate limits",
    auth: 'key',
    answers: { '200': { description: 'the account', schema: 'AccountView' } },
    errors: [401],
  },
  {
    method: 'get',
    path: '/v1/activity',
    tag: 'Account',
    summary: "The account's spend per UTC day and model over the last 7, 30 or 90 days",
    auth: 'key',
    query: queryOf(activityQuery),
    answers: { '200': { description: 'rows per day and model, and exact totals', schema: 'Activity' } },
    errors: [400, 401],
  },
  {
    method: 'get',
    path: '/v1/generations',
    tag: 'Account',
    summary: "The account's generation records, newest first (`model` filters)",
    auth: 'key',
    query: queryOf(generationsQuery),
    answers: { '200': { description: 'one page', schema: 'GenerationPage' } },
    errors: [400, 401],
  },
  {
    method: 'get',
    path: '/v1/predictions',
    tag: 'Predictions',
    summary: "The account's prediction tasks, newest first, with their outputs",
    auth: 'key',
    query: queryOf(reportPageQuery),
    answers: { '200': { description: 'one page', schema: 'PredictionPage' } },
    errors: [400, 401, 403],
  },
  {
    method: 'get',
    path: '/v1/webhooks/deliveries',
    tag: 'Predictions',
    summary: "The account's latest webhook deliveries",
    auth: 'key',
    query: queryOf(deliveriesQuery),
    answers: { '200': { description: 'the deliveries, newest first', schema: 'DeliveryList' } },
    errors: [400, 401],
  },
  {
    method: 'get',
    path: '/console',
    tag: 'Console',
    summary: 'The browser console (an HTML page; its assets under /console/assets/)',
    auth: 'none',
    answers: { '200': { description: 'an HTML page', contentType: 'text/html', schema: { type: 'string' } } },
  },
  {
    method: 'post',
    path: '/console/session',
    tag: 'Console',
    summary: 'Sign in with a key (account or admin): sets the session cookie, answers the CSRF token',
    auth: 'none',
    body: { schema: 'ConsoleSignIn' },
    answers: { '200': { description: 'the session', schema: 'ConsoleSession' } },
    errors: [400, 401, 429],
  },
  {
    method: 'get',
    path: '/console/session',
    tag: 'Console',
    summary: 'The session of the cookie sent, with its CSRF token',
    auth: 'none',
    answers: { '200': { description: 'the session', schema: 'ConsoleSession' } },
    errors: [401],
  },
  {
    method: 'delete',
    path: '/console/session',
    tag: 'Console',
    summary: 'Sign out: the session is revoked and the cookie cleared (needs the CSRF header)',
    auth: 'none',
    answers: {
      '200': {
        description: 'signed out',
        schema: obj({
          object: { type: 'string', const: 'console_session' },
          signed_out: { type: 'boolean' },
        }),
      },
    },
    errors: [403],
  },
  {
    method: 'get',
    path: '/openapi.json',
    tag: 'Operations',
    summary: 'This document',
    auth: 'none',
    answers: { '200': { description: 'OpenAPI 3.1', schema: { type: 'object' } } },
  },
  {
    method: 'get',
    path: '/docs',
    tag: 'Operations',
    summary: 'This document, rendered (Swagger UI, served by the gateway)',
    auth: 'none',
    answers: { '200': { description: 'an HTML page', contentType: 'text/html', schema: { type: 'string' } } },
  },
  {
    method: 'post',
    path: '/admin/accounts',
    tag: 'Admin',
    summary: 'Create an account',
    auth: 'admin',
    body: { schema: 'AdminCreateAccount', required: false },
    answers: { '201': { description: 'the account', schema: 'Account' } },
    errors: [400, 401, 409],
  },
  {
    method: 'get',
    path: '/admin/accounts',
    tag: 'Admin',
    summary: 'List the accounts',
    auth: 'admin',
    answers: { '200': { description: 'the accounts', schema: 'AccountList' } },
  },
  {
    method: 'get',
    path: '/admin/accounts/{id}',
    tag: 'Admin',
    summary: 'An account',
    auth: 'admin',
    answers: { '200': { description: 'the account', schema: 'Account' } },
    errors: [404],
  },
  {
    method: 'post',
    path: '/admin/accounts/{id}/keys',
    tag: 'Admin',
    summary: 'Issue a key (shown this once), with the settings of `POST /v1/keys` and its role',
    auth: 'admin',
    body: { schema: 'AdminCreateKey', required: false },
    answers: { '201': { description: 'the key', schema: 'IssuedKey' } },
    errors: [404],
  },
  {
    method: 'get',
    path: '/admin/accounts/{id}/keys',
    tag: 'Admin',
    summary: "An account's keys (ids and prefixes)",
    auth: 'admin',
    answers: { '200': { description: 'the keys', schema: 'KeyList' } },
    errors: [404],
  },
  {
    method: 'delete',
    path: '/admin/accounts/{id}/keys/{keyId}',
    tag: 'Admin',
    summary: 'Revoke a key',
    auth: 'admin',
    answers: { '200': { description: 'revoked', schema: 'Deleted' } },
    errors: [404],
  },
  {
    method: 'post',
    path: '/admin/accounts/{id}/credits',
    tag: 'Admin',
    summary: 'Add credits',
    auth: 'admin',
    body: { schema: 'AdminCredits' },
    answers: { '200': { description: "the account's credits", schema: 'AccountCredits' } },
    errors: [400, 404],
  },
  {
    method: 'put',
    path: '/admin/accounts/{id}/discount',
    tag: 'Admin',
    summary: "Set the account's discount, or one model's",
    auth: 'admin',
    body: { schema: 'AdminDiscount' },
    answers: { '200': { description: 'the account', schema: 'Account' } },
    errors: [400, 404],
  },
  {
    method: 'put',
    path: '/admin/accounts/{id}/rate-limits',
    tag: 'Admin',
    summary: "Set the account's rate limits",
    auth: 'admin',
    body: { schema: 'AdminRateLimits' },
    answers: { '200': { description: 'the account', schema: 'Account' } },
    errors: [400, 404],
  },
  {
    method: 'put',
    path: '/admin/accounts/{id}/overdraft',
    tag: 'Admin',
    summary: 'Set how far a charge may pass its hold',
    auth: 'admin',
    body: { schema: 'AdminOverdraft' },
    answers: { '200': { description: 'the account', schema: 'Account' } },
    errors: [400, 404],
  },
  {
    method: 'get',
    path: '/admin/accounts/{id}/webhook-secret',
    tag: 'Admin',
    summary: "The account's webhook secret",
    auth: 'admin',
    answers: { '200': { description: 'the secret', schema: 'WebhookSecret' } },
    errors: [404],
  },
  {
    method: 'put',
    path: '/admin/accounts/{id}/webhook-secret',
    tag: 'Admin',
    summary: 'Set the webhook secret, or generate a new one with `{}`',
    auth: 'admin',
    body: { schema: 'AdminWebhookSecret', required: false },
    answers: { '200': { description: 'the secret', schema: 'WebhookSecret' } },
    errors: [400, 404],
  },
  {
    method: 'put',
    path: '/admin/accounts/{id}/notices',
    tag: 'Admin',
    summary: "Where and when the account's low-balance notices go",
    auth: 'admin',
    body: { schema: 'NoticesRequest' },
    answers: { '200': { description: "the account's notices", schema: 'Notices' } },
    errors: [400, 404],
  },
  {
    method: 'get',
    path: '/admin/accounts/{id}/activity',
    tag: 'Admin',
    summary: "An account's spend per UTC day and model",
    auth: 'admin',
    query: queryOf(activityQuery),
    answers: { '200': { description: 'rows per day and model, and exact totals', schema: 'Activity' } },
    errors: [400, 404],
  },
  {
    method: 'get',
    path: '/admin/generations/{id}',
    tag: 'Admin',
    summary: 'One generation record of any account',
    auth: 'admin',
    answers: { '200': { description: 'the record, with `account_id`', schema: 'Generation' } },
    errors: [404],
  },
  {
    method: 'get',
    path: '/admin/deployments',
    tag: 'Admin',
    summary: "The models in service, each deployment's prices and health as this instance sees it",
    auth: 'admin',
    answers: { '200': { description: 'the models', schema: 'DeploymentList' } },
  },
  {
    method: 'get',
    path: '/admin/accounts/{id}/generations',
    tag: 'Admin',
    summary: "An account's generation records, newest first",
    auth: 'admin',
    query: Object.entries((fromZod(pageQuery).properties ?? {}) as Record<string, JsonSchema>).map(
      ([name, schema]) => ({ name, schema }),
    ),
    answers: { '200': { description: 'one page', schema: 'GenerationPage' } },
    errors: [404],
  },
]

/** The request schemas, from the zod schemas the routes parse with. */
function requestSchemas(): Record<string, JsonSchema> {
  return {
    ChatCompletionRequest: fromZod(chatRequestSchema),
    EmbeddingsRequest: fromZod(embeddingsRequestSchema),
    ResponsesRequest: fromZod(responsesRequestSchema),
    MessagesRequest: fromZod(messagesRequestSchema),
    CountTokensRequest: fromZod(countTokensRequestSchema),
    PredictionRequest: {
      ...fromZod(predictionRequestSchema),
      description:
        "`input` follows the model's input family (`GET /v1/models` shows it as `input_family`): see the " +
        '`*Input` schemas.',
    },
    ImageInput: fromZod(imageInputSchema),
    VideoInput: fromZod(videoInputSchema),
    SpeechInput: fromZod(speechInputSchema),
    VideoAInput: fromZod(videoAInputSchema),
    VideoBInput: fromZod(videoBInputSchema),
    VideoCInput: fromZod(videoCInputSchema),
    FileUpload: obj({
      file: { type: 'string', contentMediaType: 'application/octet-stream', description: 'the file part' },
      purpose: { type: 'string', enum: ['assistants', 'batch', 'fine-tune', 'vision', 'user_data'] },
    }),
    AdminCreateAccount: fromZod(createAccountBody),
    AdminCredits: fromZod(creditsBody),
    AdminDiscount: fromZod(discountBody),
    AdminRateLimits: fromZod(rateLimitsBody),
    AdminOverdraft: fromZod(overdraftBody),
    AdminWebhookSecret: fromZod(webhookSecretBody),
    AdminCreateKey: fromZod(adminCreateKeyBody),
    CreateKey: fromZod(createKeyBody),
    UpdateKey: fromZod(updateKeyBody),
    NoticesRequest: fromZod(noticesBody),
    ConsoleSignIn: obj({ key: { type: 'string', description: "an account's key or the admin key" } }),
  }
}

const HEADER_TEXT: Record<string, string> = {
  'X-Request-Id': '32 hex characters; a well-formed one sent by the client is kept',
  'X-Generation-Id': "the generation id (`gen-…`), also the answer's `id`",
  'X-Junction-Provider': 'the provider that answered (or was tried last)',
  'X-Junction-Deployment': 'the deployment that answered (or was tried last)',
  'X-Junction-Attempts': 'upstream calls made for this request',
  'X-Junction-Token-Count': '`upstream` or `estimate`',
  'X-RateLimit-Limit': "the account's requests per minute",
  'X-RateLimit-Remaining': 'requests left in the window',
  'X-RateLimit-Reset': 'seconds until the window frees a request',
  'X-RateLimit-Scope':
    'which limit refused: `account-requests`, `account-tokens`, `account-bodies`, `key-requests`, `key-tokens`, `upstream`',
  'Retry-After': 'seconds to wait before retrying',
}

const SECURITY: Record<Auth, Record<string, string[]>[]> = {
  key: [{ apiKey: [] }],
  admin: [{ adminKey: [] }],
  anthropic: [{ anthropicKey: [] }, { apiKey: [] }],
  none: [],
}

function answer(a: Answer): JsonSchema {
  const schema = typeof a.schema === 'string' ? { $ref: `#/components/schemas/${a.schema}` } : a.schema
  const headers = Object.fromEntries(
    ['X-Request-Id', ...(a.headers ?? [])].map((h) => [h, { $ref: `#/components/headers/${h}` }]),
  )
  return {
    description: a.description,
    headers,
    ...(schema ? { content: { [a.contentType ?? 'application/json']: { schema } } } : {}),
  }
}

/** The whole document. Pure: the same code gives the same document. */
export function buildOpenApi(): JsonSchema {
  const paths: Record<string, Record<string, JsonSchema>> = {}
  for (const r of ROUTES) {
    const params = [...r.path.matchAll(/\{(\w+)\}/g)].map((m) => ({
      name: m[1],
      in: 'path',
      required: true,
      schema: { type: 'string' },
    }))
    const errorRef =
      r.path === '/v1/messages' || r.path.startsWith('/v1/messages/') ? 'AnthropicError' : 'Error'
    const responses: Record<string, JsonSchema> = Object.fromEntries(
      Object.entries(r.answers).map(([status, a]) => [status, answer(a)]),
    )
    for (const status of r.errors ?? []) {
      responses[String(status)] = {
        $ref: `#/components/responses/${errorRef === 'Error' ? '' : 'Anthropic'}Error${status}`,
      }
    }
    responses['4XX'] = { $ref: `#/components/responses/${errorRef}` }
    responses['5XX'] = { $ref: `#/components/responses/${errorRef}` }
    const operation: JsonSchema = {
      operationId: `${r.method}${r.path.replace(/[^A-Za-z0-9]+(.)?/g, (_, c: string | undefined) => (c ?? '').toUpperCase())}`,
      tags: [r.tag],
      summary: r.summary,
      ...(r.description ? { description: r.description } : {}),
      security: SECURITY[r.auth],
      parameters: [
        ...params,
        ...(r.query ?? []).map((q) => ({
          name: q.name,
          in: 'query',
          required: q.required ?? false,
          schema: q.schema,
          ...(q.description ? { description: q.description } : {}),
        })),
        ...(r.headers ?? []).map((h) => ({
          name: h.name,
          in: 'header',
          required: false,
          schema: { type: 'string' },
          description: h.description,
        })),
      ],
      ...(r.body
        ? {
            requestBody: {
              required: r.body.required ?? true,
              content: {
                [r.body.contentType ?? 'application/json']: {
                  schema: { $ref: `#/components/schemas/${r.body.schema}` },
                },
              },
            },
          }
        : {}),
      responses,
    }
    const stream = STREAMS[r.path]
    if (stream !== undefined) {
      ;(responses['200'] as { content: Record<string, unknown> }).content['text/event-stream'] = {
        schema: { type: 'string', description: stream },
      }
    }
    ;(paths[r.path] ??= {})[r.method] = operation
  }

  const statuses = [...new Set(ROUTES.flatMap((r) => r.errors ?? []))].sort()
  const errorResponse = (schema: string, description: string): JsonSchema => ({
    description,
    headers: { 'X-Request-Id': { $ref: '#/components/headers/X-Request-Id' } },
    content: { 'application/json': { schema: { $ref: `#/components/schemas/${schema}` } } },
  })
  const responses: Record<string, JsonSchema> = {
    Error: errorResponse('Error', 'the error envelope'),
    AnthropicError: errorResponse('AnthropicError', "an error in Anthropic's shape"),
  }
  for (const s of statuses) {
    responses[`Error${s}`] = errorResponse('Error', `error ${s} (see the error reference for its codes)`)
    responses[`AnthropicError${s}`] = errorResponse('AnthropicError', `error ${s}, in Anthropic's shape`)
    const withRetry = s === 429 || s === 503
    if (withRetry) {
      ;(responses[`Error${s}`] as { headers: Record<string, unknown> }).headers['Retry-After'] = {
        $ref: '#/components/headers/Retry-After',
      }
    }
    if (s === 429) {
      ;(responses[`Error${s}`] as { headers: Record<string, unknown> }).headers['X-RateLimit-Scope'] = {
        $ref: '#/components/headers/X-RateLimit-Scope',
      }
    }
  }

  return {
    openapi: OPENAPI_VERSION,
    info: {
      title: 'Junction',
      version: '0.1.0',
      summary: 'A self-hosted AI inference gateway: one OpenAI-style API in front of every model provider.',
      description:
        "Every error has one envelope (`Error`); `/v1/messages` answers in Anthropic's shape instead. " +
        'Every answer carries `X-Request-Id`.',
    },
    servers: [{ url: '/', description: 'this gateway' }],
    tags: [
      'Chat',
      'Embeddings',
      'Responses',
      'Messages',
      'Models',
      'Files',
      'Predictions',
      'Account',
      'Keys',
      'Console',
      'Operations',
      'Admin',
    ].map((name) => ({ name })),
    paths,
    components: {
      securitySchemes: {
        apiKey: { type: 'http', scheme: 'bearer', description: "an account's API key" },
        anthropicKey: {
          type: 'apiKey',
          in: 'header',
          name: 'x-api-key',
          description: "an account's API key",
        },
        adminKey: { type: 'http', scheme: 'bearer', description: 'GATEWAY_ADMIN_KEY' },
      },
      headers: Object.fromEntries(
        Object.entries(HEADER_TEXT).map(([name, description]) => [
          name,
          { description, schema: { type: 'string' } },
        ]),
      ),
      schemas: { ...requestSchemas(), ...answerSchemas },
      responses,
    },
  }
}
