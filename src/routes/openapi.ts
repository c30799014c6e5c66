import { readFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import type { FastifyPluginAsync } from 'fastify'
import { GatewayError } from '../errors.ts'
import { buildOpenApi } from '../openapi/document.ts'

// The API's OpenAPI 3.1 document at /openapi.json, and a rendered reference at /docs: Swagger UI,
// whose files come from the swagger-ui-dist package and are served by the gateway itself (no CDN, so
// the page works on a network without the internet). Neither needs a key: they describe the API,
// they hold no account's data.

const uiDir = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'))

/** The files of the page, by the name it asks for them: a fixed list, nothing else is read. */
const ASSETS: Record<string, { file?: string; type: string; text?: string }> = {
  'swagger-ui.css': { file: 'swagger-ui.css', type: 'text/css; charset=utf-8' },
  'swagger-ui-bundle.js': { file: 'swagger-ui-bundle.js', type: 'text/javascript; charset=utf-8' },
  'favicon-32x32.png': { file: 'favicon-32x32.png', type: 'image/png' },
  // In a file rather than inline, so a Content-Security-Policy without 'unsafe-inline' still allows it.
  // validatorUrl: null keeps Swagger UI from sending the document to its online validator for a badge.
  'init.js': {
    type: 'text/javascript; charset=utf-8',
    text: "window.ui = SwaggerUIBundle({ url: '/openapi.json', dom_id: '#reference', deepLinking: true, validatorUrl: null })\n",
  },
}

const PAGE = `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <title>Junction API reference</title>
    <link rel="icon" type="image/png" href="/docs/assets/favicon-32x32.png" />
    <link rel="stylesheet" href="/docs/assets/swagger-ui.css" />
  </head>
  <body>
    <div id="reference"></div>
    <script src="/docs/assets/swagger-ui-bundle.js"></script>
    <script src="/docs/assets/init.js"></script>
  </body>
</html>
`

export const openapiRoutes: FastifyPluginAsync = async (app) => {
  // Built once: the document only changes with the code.
  const document = JSON.stringify(buildOpenApi())
  app.get('/openapi.json', async (_request, reply) =>
    reply.type('application/json; charset=utf-8').send(document),
  )
  app.get('/docs', async (_request, reply) => reply.type('text/html; charset=utf-8').send(PAGE))

  const cache = new Map<string, Buffer>()
  app.get<{ Params: { name: string } }>('/docs/assets/:name', async (request, reply) => {
    const asset = ASSETS[request.params.name]
    if (asset === undefined) {
      throw new GatewayError('route_not_found', `no route for GET /docs/assets/${request.params.name}`)
    }
    let body = cache.get(request.params.name)
    if (body === undefined) {
      body =
        asset.file === undefined ? Buffer.from(asset.text ?? '') : await readFile(join(uiDir, asset.file))
      cache.set(request.params.name, body)
    }
    return reply.type(asset.type).header('cache-control', 'public, max-age=3600').send(body)
  })
}
