import { z } from 'zod'
import { errorCatalogue } from '../errors.ts'

// JSON Schema (2020-12, OpenAPI 3.1's dialect) for the OpenAPI document: requests converted from the
// zod schemas the routes parse with, answers written out here from the presenters they mirror. The
// answers' schemas are checked against real answers in test/http/openapi.test.ts.

export type JsonSchema = Record<string, unknown>

/**
 * A request schema from its zod schema, as the client sends it (`io: 'input'`: before defaults and
 * transforms). Refinements have no JSON Schema form; the routes still apply them (400 naming the field).
 */
export function fromZod(schema: z.ZodType): JsonSchema {
  const json = z.toJSONSchema(schema, {
    io: 'input',
    unrepresentable: 'any',
    target: 'draft-2020-12',
  }) as JsonSchema
  delete json.$schema
  return json
}

const str = (description?: string): JsonSchema => ({
  type: 'string',
  ...(description ? { description } : {}),
})
const int = (description?: string): JsonSchema => ({
  type: 'integer',
  ...(description ? { description } : {}),
})
const num = (description?: string): JsonSchema => ({
  type: 'number',
  ...(description ? { description } : {}),
})
const bool = (description?: string): JsonSchema => ({
  type: 'boolean',
  ...(description ? { description } : {}),
})
const nullable = (s: JsonSchema): JsonSchema => ({ anyOf: [s, { type: 'null' }] })
const constant = (value: string): JsonSchema => ({ type: 'string', const: value })

/** An object whose listed properties are required; others may be present (answers grow fields). */
export function obj(
  properties: Record<string, JsonSchema>,
  required: string[] = Object.keys(properties),
): JsonSchema {
  return { type: 'object', properties, required }
}

const ref = (name: string): JsonSchema => ({ $ref: `#/components/schemas/${name}` })

const usageDetails: JsonSchema = { type: 'object', additionalProperties: { type: ['integer', 'boolean'] } }

const chatUsage = obj(
  {
    prompt_tokens: int(),
    completion_tokens: int(),
    total_tokens: int(),
    prompt_tokens_details: usageDetails,
    completion_tokens_details: usageDetails,
  },
  ['prompt_tokens', 'completion_tokens', 'total_tokens'],
)

const money = {
  upstream_cost: num('USD before discount'),
  discount: num('USD taken off'),
  discount_percent: num('the discount as a decimal rate: 0.75 is 75 % off'),
  cost: num('USD charged'),
}

/** The answers' schemas, by component name. */
export const answerSchemas: Record<string, JsonSchema> = {
  Error: obj(
    {
      error: obj({
        message: str(),
        type: { type: 'string', enum: [...new Set(Object.values(errorCatalogue).map((e) => e.type))] },
        code: { type: 'string', enum: Object.keys(errorCatalogue) },
        param: nullable(str('the field at fault, as a path such as `messages[0].role`')),
      }),
      request_id: str('the X-Request-Id of the request'),
    },
    ['error'],
  ),
  AnthropicError: obj(
    {
      type: constant('error'),
      error: obj({ type: str(), message: str() }),
      request_id: str(),
    },
    ['type', 'error'],
  ),
  ChatCompletion: obj(
    {
      id: str('the generation id, `gen-…`'),
      object: constant('chat.completion'),
      created: int('Unix seconds'),
      model: str('the slug of the model that answered'),
      choices: {
        type: 'array',
        items: obj(
          {
            index: int(),
            message: obj(
              {
                role: constant('assistant'),
                content: nullable(str()),
                refusal: nullable(str()),
                tool_calls: { type: 'array', items: { type: 'object' } },
                reasoning: str(),
                reasoning_details: { type: 'array', items: { type: 'object' } },
              },
              ['role'],
            ),
            logprobs: nullable({ type: 'object' }),
            finish_reason: {
              anyOf: [
                { type: 'string', enum: ['stop', 'length', 'tool_calls', 'content_filter', 'function_call'] },
                { type: 'null' },
              ],
            },
          },
          ['index', 'message', 'finish_reason'],
        ),
      },
      usage: chatUsage,
    },
    ['id', 'object', 'created', 'model', 'choices'],
  ),
  ChatCompletionChunk: obj(
    {
      id: str(),
      object: constant('chat.completion.chunk'),
      created: int(),
      model: str(),
      choices: {
        type: 'array',
        items: obj({ index: int(), delta: { type: 'object' }, finish_reason: nullable(str()) }, [
          'index',
          'delta',
        ]),
      },
      usage: chatUsage,
    },
    ['id', 'object', 'created', 'model', 'choices'],
  ),
  Embeddings: obj(
    {
      object: constant('list'),
      data: {
        type: 'array',
        items: obj({
          object: constant('embedding'),
          index: int(),
          embedding: {
            anyOf: [{ type: 'array', items: num() }, str('base64 of little-endian float32s')],
          },
        }),
      },
      model: str(),
      usage: obj({ prompt_tokens: int(), total_tokens: int() }),
    },
    ['object', 'data', 'model', 'usage'],
  ),
  Model: obj(
    {
      id: str('the slug requests use'),
      object: constant('model'),
      created: int(),
      owned_by: str(),
      type: { type: 'string', enum: ['chat', 'embedding', 'image', 'video', 'speech'] },
      input_family: str('media models: the input rules their predictions follow'),
      pricing: nullable({ type: 'object', description: 'list prices and their units' }),
      aliases: { type: 'array', items: str() },
    },
    ['id', 'object', 'created', 'owned_by', 'type', 'pricing'],
  ),
  ModelList: obj({ object: constant('list'), data: { type: 'array', items: ref('Model') } }),
  File: obj({
    id: str('`file-…`'),
    object: constant('file'),
    bytes: int(),
    created_at: int('Unix seconds'),
    filename: str(),
    purpose: { type: 'string', enum: ['assistants', 'batch', 'fine-tune', 'vision', 'user_data'] },
    status: constant('processed'),
  }),
  FileList: obj({
    object: constant('list'),
    data: { type: 'array', items: ref('File') },
    first_id: nullable(str()),
    last_id: nullable(str()),
    has_more: bool(),
  }),
  Deleted: obj({ id: str(), object: str(), deleted: bool() }),
  Credits: obj({
    data: obj({
      total_credits: num('USD allocated'),
      total_usage: num('USD charged'),
      balance: num('total_credits − total_usage'),
    }),
  }),
  Generation: obj(
    {
      api: str('the route that served it'),
      generationId: str(),
      model: str(),
      provider: str(),
      createAt: { type: 'string', format: 'date-time' },
      generationTime: num('ms'),
      latency: nullable(num('ms to the first byte of the upstream')),
      usage: {
        type: 'object',
        properties: { prompt_tokens: int(), completion_tokens: int(), total_tokens: int(), ...money },
        required: ['prompt_tokens', 'completion_tokens', 'total_tokens', ...Object.keys(money)],
      },
      streamed: bool(),
      finishReason: nullable(str()),
      cancelled: bool('the client went away before the end'),
      cost_source: { type: 'string', enum: ['upstream', 'estimate'] },
      unbilled_overage: obj({ usd: num(), tokens: int() }),
      attempts: {
        type: 'array',
        description:
          "every upstream call, in order, the answering one last; a prediction's: its submits, then the polls that failed",
        items: obj({
          provider: str(),
          deployment: str(),
          model: str(),
          status: nullable(int()),
          outcome: str(),
          startedAt: { type: 'string', format: 'date-time' },
          durationMs: num(),
        }),
      },
    },
    ['api', 'generationId', 'model', 'createAt', 'usage', 'streamed', 'cost_source'],
  ),
  PredictionCreated: obj({
    data: obj({ task_id: str('32 hex'), task_status: constant('processing') }),
    request_id: str(),
  }),
  Prediction: obj(
    {
      code: constant('0'),
      data: obj(
        {
          task_id: str(),
          task_status: { type: 'string', enum: ['processing', 'success', 'failed', 'cancelled'] },
          output: {
            type: 'array',
            items: obj(
              {
                type: { type: 'string', enum: ['image', 'video', 'audio'] },
                image: str('signed URL'),
                video: str('signed URL'),
                audio: str('signed URL'),
              },
              ['type'],
            ),
          },
          error: obj({ code: str(), message: str() }),
        },
        ['task_id', 'task_status'],
      ),
      usage: obj(money),
      request_id: str(),
    },
    ['code', 'data', 'request_id'],
  ),
  WebhookSecret: obj({ object: constant('webhook_secret'), secret: str('`whsec_…`') }),
  AnthropicMessage: obj(
    {
      id: str(),
      type: constant('message'),
      role: constant('assistant'),
      model: str(),
      content: { type: 'array', items: { type: 'object' } },
      stop_reason: nullable(str()),
      stop_sequence: nullable(str()),
      usage: { type: 'object' },
    },
    ['id', 'type', 'role', 'model', 'content', 'stop_reason', 'usage'],
  ),
  TokenCount: obj({ input_tokens: int() }),
  Response: obj(
    {
      id: str('`resp_…`'),
      object: constant('response'),
      created_at: int(),
      status: { type: 'string', enum: ['completed', 'incomplete', 'failed', 'in_progress'] },
      model: str(),
      output: { type: 'array', items: { type: 'object' } },
      usage: nullable({ type: 'object' }),
    },
    ['id', 'object', 'created_at', 'status', 'model', 'output'],
  ),
  Account: obj({
    id: str(),
    object: constant('account'),
    name: str(),
    created_at: int(),
    discount_percent: num(),
    model_discounts: { type: 'object', additionalProperties: num() },
    rate_limits: obj({ requests_per_minute: nullable(int()), tokens_per_minute: nullable(int()) }),
    rate_limits_inherited: obj({ requests_per_minute: bool(), tokens_per_minute: bool() }),
    overdraft_usd: num(),
    credits: ref('AccountCredits'),
  }),
  AccountCredits: obj({
    total_credits: num(),
    total_usage: num(),
    balance: num(),
    reserved: num('USD held by running requests and by the holds instances took ahead for the account'),
  }),
  AccountList: obj({ object: constant('list'), data: { type: 'array', items: ref('Account') } }),
  IssuedKey: obj(
    {
      id: str(),
      key: str('`sk-jn-…`, shown this once'),
      hash: str("the key's SHA-256 (its id in the key API)"),
      prefix: str(),
      data: ref('ApiKey'),
    },
    ['id', 'key', 'prefix'],
  ),
  KeyList: obj({
    object: constant('list'),
    data: { type: 'array', items: obj({ id: str(), prefix: nullable(str()) }, ['id']) },
  }),
  ApiKey: obj(
    {
      hash: str("the key's SHA-256, lowercase hex: its id in the key API"),
      name: str(),
      label: str('the first characters of the key, then `...`'),
      disabled: bool(),
      limit: nullable(num('USD the key may spend in its window; null: no limit of its own')),
      limit_remaining: nullable(num('USD left in the current window (its requests in flight aside)')),
      limit_reset: nullable({ type: 'string', enum: ['daily', 'weekly', 'monthly'] }),
      usage: num('USD charged to the key, ever'),
      usage_daily: num('USD charged since 00:00 UTC'),
      usage_weekly: num('USD charged since Monday 00:00 UTC'),
      usage_monthly: num('USD charged since the 1st, 00:00 UTC'),
      created_at: nullable(str()),
      updated_at: nullable(str()),
      expires_at: nullable(str()),
      is_management_key: bool(),
      allowed_models: nullable({ type: 'array', items: str() }),
      rate_limits: obj({ requests_per_minute: nullable(int()), tokens_per_minute: nullable(int()) }),
      limit_low_threshold: nullable(num()),
      held: num('USD its requests in flight hold against its limit'),
    },
    [
      'hash',
      'name',
      'label',
      'disabled',
      'limit',
      'limit_remaining',
      'limit_reset',
      'usage',
      'is_management_key',
    ],
  ),
  ApiKeyData: obj({ data: ref('ApiKey') }),
  ApiKeyCreated: obj({ data: ref('ApiKey'), key: str('`sk-jn-…`, shown this once') }),
  ApiKeyPage: obj({ data: { type: 'array', items: ref('ApiKey') } }),
  CurrentKey: obj({
    data: obj(
      {
        label: str(),
        limit: nullable(num()),
        limit_remaining: nullable(num()),
        limit_reset: nullable(str()),
        usage: num(),
        usage_daily: num(),
        usage_weekly: num(),
        usage_monthly: num(),
        expires_at: nullable(str()),
        is_management_key: bool(),
        rate_limit: obj({ requests: int('requests per minute in force; -1: none'), interval: str() }),
      },
      ['label', 'limit', 'limit_remaining', 'usage', 'is_management_key', 'rate_limit'],
    ),
  }),
  AccountView: obj(
    {
      id: str(),
      object: constant('account'),
      name: str(),
      credits: obj({
        total_credits: num(),
        total_usage: num(),
        balance: num(),
        reserved: num('USD held by running requests and by the holds instances took ahead for the account'),
        available: num('balance less what is held'),
      }),
      discount_percent: num(),
      model_discounts: { type: 'object', additionalProperties: num() },
      rate_limits: obj({ requests_per_minute: nullable(int()), tokens_per_minute: nullable(int()) }),
    },
    ['id', 'object', 'credits'],
  ),
  Activity: obj({
    object: constant('list'),
    days: int(),
    since: str('first UTC day, YYYY-MM-DD'),
    until: str('last UTC day (today), YYYY-MM-DD'),
    data: {
      type: 'array',
      items: obj({
        date: str(),
        model: str(),
        requests: int(),
        prompt_tokens: int(),
        completion_tokens: int(),
        upstream_cost: num(),
        cost: num(),
      }),
    },
    total_cost: num('the sum of the rows, added exactly before conversion'),
    total_requests: int(),
  }),
  PredictionPage: obj({
    object: constant('list'),
    data: {
      type: 'array',
      items: obj(
        {
          id: str(),
          object: constant('prediction'),
          model: str(),
          status: str(),
          created_at: int(),
          updated_at: int(),
          output: { type: 'array' },
          error: {},
          usage: {},
        },
        ['id', 'object', 'model', 'status', 'created_at'],
      ),
    },
    next_cursor: nullable(str()),
  }),
  DeliveryList: obj({
    object: constant('list'),
    data: {
      type: 'array',
      items: obj(
        {
          id: str(),
          object: constant('webhook_delivery'),
          task_id: str(),
          url: str(),
          status: str(),
          attempts: int(),
          last_error: nullable(str()),
          created_at: int(),
          next_attempt_at: nullable(int()),
        },
        ['id', 'object', 'task_id', 'url', 'status', 'attempts', 'created_at'],
      ),
    },
  }),
  DeploymentList: obj({
    object: constant('list'),
    data: {
      type: 'array',
      items: obj(
        {
          model: str(),
          type: str(),
          strategy: str(),
          deployments: {
            type: 'array',
            items: obj(
              {
                id: str(),
                provider: str(),
                upstream_model: str(),
                weight: {},
                pricing: {},
                health: obj({
                  breaker: str(),
                  consecutive_failures: int(),
                  latency_ms: nullable(num()),
                  error_rate: nullable(num()),
                }),
              },
              ['id', 'provider', 'health'],
            ),
          },
        },
        ['model', 'deployments'],
      ),
    },
  }),
  ConsoleSession: obj(
    {
      object: constant('console_session'),
      role: str('`account` or `admin`'),
      account: nullable(obj({ id: str(), name: str() })),
      management: bool(),
      admin_api: bool(),
      csrf_token: str('send it back in `X-CSRF-Token` on every state-changing call'),
      expires_at: int(),
    },
    ['object', 'role', 'csrf_token', 'expires_at'],
  ),
  Notices: obj({
    data: obj({ url: nullable(str()), balance_low_threshold: nullable(num()) }),
  }),
  GenerationPage: obj({
    object: constant('list'),
    data: { type: 'array', items: ref('Generation') },
    next_cursor: nullable(str()),
  }),
  Health: obj({ status: str() }),
}
