import type { ChatChunk } from '../domain/chat.ts'
import { CHUNK_TEXT, type ChunkText } from '../providers/shared/stream.ts'

/**
 * The JSON text of a stream's chunks as Chat Completions sends them: JSON.stringify's, written with
 * less work for the chunks an adapter made from a template (CHUNK_TEXT): the first of a template is
 * serialised, and the text around its content's string is kept; the next ones of the same template
 * are that text with their own content's JSON text in between, which is what serialising them would
 * give (the template's chunks differ in their content only, and the relay rewrites the same fields of
 * each, with the same values for a whole stream). One per stream.
 */
export function createChunkSerialiser(): (event: unknown) => string {
  let known: { template: object; id: string; model: string; before: string; after: string } | undefined
  return (event) => {
    const text = (event as ChunkText)[CHUNK_TEXT]
    if (text === undefined) return JSON.stringify(event)
    const chunk = event as ChatChunk
    const k = known
    if (
      k !== undefined &&
      k.template === text.template &&
      k.id === chunk.id &&
      k.model === chunk.model &&
      chunk.choices[0]?.delta.content === text.content
    ) {
      return k.before + text.body + k.after
    }
    const json = JSON.stringify(event)
    const literal = `"${text.body}"`
    const key = `"content":${literal}`
    const at = json.indexOf(key)
    if (at >= 0 && json.indexOf(key, at + 1) < 0 && chunk.choices[0]?.delta.content === text.content) {
      const start = at + key.length - literal.length
      known = {
        template: text.template,
        id: chunk.id,
        model: chunk.model,
        before: json.slice(0, start + 1),
        after: json.slice(start + literal.length - 1),
      }
    }
    return json
  }
}
