import { GatewayError } from '../errors.ts'
import { owned } from '../owned.ts'
import type { Logger } from '../logger.ts'
import type { ResponseObject } from '../dialects/responses/response.ts'
import type { ResponsesInputItem } from '../schemas/responses.ts'
import type { StoredResponse, Store } from '../store/types.ts'

// Stored Responses API answers: what previous_response_id continues and GET/DELETE /v1/responses/{id}
// serve. The answer itself goes through the chat pipeline (inference/chat.ts); this is its memory.

export interface ResponsesDeps {
  store: Pick<Store, 'responses'>
  now: () => number
}

/** The conversation a stored response ended: its input items, then its output items. */
export async function loadConversation(
  deps: ResponsesDeps,
  accountId: string,
  responseId: string,
): Promise<ResponsesInputItem[]> {
  const stored = await getStored(deps, accountId, responseId, 'previous_response_id')
  const output = (stored.response.output ?? []) as ResponsesInputItem[]
  return [...(stored.input as ResponsesInputItem[]), ...output]
}

/**
 * Keeps an answer with the conversation it followed. The answer is already paid for and on its way:
 * a store that fails is logged, and the answer still goes out (a later previous_response_id naming it
 * is then a 404).
 */
export async function saveResponse(
  deps: ResponsesDeps,
  r: { accountId: string; input: ResponsesInputItem[]; response: ResponseObject },
  log: Logger,
): Promise<void> {
  try {
    await deps.store.responses.put({
      id: r.response.id,
      accountId: r.accountId,
      createdAt: deps.now(),
      input: r.input,
      response: r.response,
    })
  } catch (err) {
    log.warn({ err, responseId: r.response.id }, 'the response could not be stored')
  }
}

/**
 * The input with each `item_reference` replaced by the stored item it names. An item id carries its
 * response's (`msg_<r>_<n>` is output item n of `resp_<r>`: dialects/responses/response.ts), so one
 * read per response referenced. An item that is not stored for this account is a 404.
 */
export async function resolveItemReferences(
  deps: ResponsesDeps,
  accountId: string,
  items: ResponsesInputItem[],
): Promise<ResponsesInputItem[]> {
  if (!items.some(isReference)) return items
  const responses = new Map<string, StoredResponse | null>()
  const out: ResponsesInputItem[] = []
  for (const [i, item] of items.entries()) {
    if (!isReference(item)) {
      out.push(item)
      continue
    }
    const param = `input[${i}].id`
    const match = /^(?:msg|fc|rs)_(.+)_\d+$/.exec(item.id)
    const responseId = match ? `resp_${match[1]}` : undefined
    if (responseId !== undefined && !responses.has(responseId))
      responses.set(responseId, await deps.store.responses.get(accountId, responseId))
    const stored = responseId === undefined ? null : responses.get(responseId)
    const found = ((stored?.response.output ?? []) as { id?: unknown }[]).find((o) => o.id === item.id)
    if (!found)
      throw new GatewayError('response_not_found', `no stored item ${JSON.stringify(item.id.slice(0, 64))}`, {
        param,
      })
    out.push(found as ResponsesInputItem)
  }
  return out
}

export function isReference(item: ResponsesInputItem): item is { type: 'item_reference'; id: string } {
  return (item as { type?: unknown }).type === 'item_reference'
}

export async function getStoredResponse(
  deps: ResponsesDeps,
  accountId: string,
  id: string,
): Promise<Record<string, unknown>> {
  return (await getStored(deps, accountId, id)).response
}

export async function deleteStoredResponse(
  deps: ResponsesDeps,
  accountId: string,
  id: string,
): Promise<void> {
  if (!(await deps.store.responses.delete(accountId, id))) throw notFound(id)
}

async function getStored(
  deps: ResponsesDeps,
  accountId: string,
  id: string,
  param?: string,
): Promise<StoredResponse> {
  return owned(accountId, await deps.store.responses.get(accountId, id), () => notFound(id, param))
}

// Another account's id is answered exactly as an unknown one.
const notFound = (id: string, param?: string): GatewayError =>
  new GatewayError('response_not_found', `no stored response ${JSON.stringify(id.slice(0, 64))}`, { param })
