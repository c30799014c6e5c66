import type { JsonSchema } from '../src/openapi/schemas.ts'

// docs/reference/api.md: the OpenAPI document as one markdown page (what a reader of the repository
// sees without a running gateway; a running one renders the same document at /docs).

interface Operation {
  summary: string
  description?: string
  security: Record<string, string[]>[]
  parameters: { name: string; in: string; required: boolean; description?: string }[]
  requestBody?: { content: Record<string, { schema: { $ref: string } }> }
  responses: Record<
    string,
    { $ref?: string; description?: string; content?: Record<string, { schema: JsonSchema }> }
  >
  tags: string[]
}

const AUTH: Record<string, string> = {
  apiKey: 'account key (`Authorization: Bearer`)',
  anthropicKey: 'account key (`x-api-key`)',
  adminKey: 'admin key',
}

const schemaName = (s: JsonSchema | undefined): string => {
  const ref = s?.$ref
  return typeof ref === 'string' ? `\`${ref.split('/').at(-1)}\`` : ''
}

export function renderApiReference(doc: JsonSchema): string {
  const paths = doc.paths as Record<string, Record<string, Operation>>
  const tags = (doc.tags as { name: string }[]).map((t) => t.name)
  const sections = tags.map((tag) => {
    const rows: string[] = []
    for (const [path, ops] of Object.entries(paths)) {
      for (const [method, op] of Object.entries(ops)) {
        if (!op.tags.includes(tag)) continue
        const auth =
          op.security.length === 0
            ? 'none'
            : op.security.map((s) => Object.keys(s).map((k) => AUTH[k] ?? k)).join(' or ')
        const body = op.requestBody
          ? Object.entries(op.requestBody.content)
              .map(([type, c]) => `${schemaName(c.schema)}${type === 'application/json' ? '' : ` (${type})`}`)
              .join(', ')
          : ''
        const ok = Object.entries(op.responses)
          .filter(([status]) => /^2/.test(status))
          .map(([status, r]) => {
            const types = Object.entries(r.content ?? {}).map(([type, c]) =>
              type === 'application/json' ? schemaName(c.schema) || 'JSON' : type,
            )
            return `${status} ${types.join(' or ')}`.trim()
          })
          .join('; ')
        const errors = Object.keys(op.responses)
          .filter((s) => /^[45]\d\d$/.test(s))
          .join(', ')
        const params = op.parameters
          .filter((p) => p.in !== 'path')
          .map(
            (p) => `\`${p.name}\`${p.in === 'header' ? ' (header)' : ''}${p.required ? ' (required)' : ''}`,
          )
          .join(', ')
        rows.push(
          `| \`${method.toUpperCase()} ${path}\` | ${op.summary} | ${auth} | ${params} | ${body} | ${ok} | ${errors} |`,
        )
      }
    }
    return [
      `### ${tag}`,
      '| operation | what | key | parameters | body | answer | errors named |',
      '| --- | --- | --- | --- | --- | --- | --- |',
      ...rows,
    ].join('\n')
  })
  const schemas = Object.keys((doc.components as { schemas: Record<string, unknown> }).schemas)
  return `Every route of the gateway, from the OpenAPI ${String(doc.openapi)} document: a running gateway serves it at
\`/openapi.json\` and renders it at \`/docs\` (Swagger UI, its files served by the gateway itself). Request bodies are
the JSON Schema form of the zod schemas the routes validate with; refinements a schema cannot express (a
\`reasoning\` that needs \`enabled\`, for one) are still enforced, as a 400 naming the field. Every answer may also be
an error in the envelope (\`Error\`, or \`AnthropicError\` on \`/v1/messages\`): the errors named are those worth
handling, any 4xx or 5xx can happen. Admin routes and \`/metrics\` exist only when \`GATEWAY_ADMIN_KEY\` is set.

${sections.join('\n\n')}

### Schemas

${schemas.map((s) => `\`${s}\``).join(', ')}: see \`components.schemas\` in \`/openapi.json\`.`
}
