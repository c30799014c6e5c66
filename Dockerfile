# Junction gateway image. Node 24 runs the TypeScript sources directly (type stripping): there is
# no compile step, so the only build work is installing the production dependencies.
ARG NODE_IMAGE=node:24-slim

# Production dependencies only, exactly as locked. Dev dependencies (the type checker, linters, test
# tools and the `node` package that pins Node 24 for development) are never installed: the image's
# own Node 24 runs the gateway. No production dependency needs an install script.
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund \
  && npm cache clean --force

FROM ${NODE_IMAGE}
ENV NODE_ENV=production
# ffmpeg encodes speech to MP3 and Ogg Opus and renders the mock provider's videos (Debian's package:
# libmp3lame, libopus, libx264).
RUN apt-get update \
  && apt-get install -y --no-install-recommends ffmpeg \
  && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# Owned by root and read-only for the `node` user the gateway runs as.
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY src ./src
# The browser console's pages and scripts (served at /console).
COPY console ./console
# State lives under /app/data: the SQLite database (./data/junction.db by default), uploaded files
# (./data/files) and predictions' outputs (./data/outputs): the only directory the gateway writes,
# owned by its user; mount a volume there.
RUN mkdir -p /app/data/files /app/data/outputs && chown -R node:node /app/data
# Node's compile cache, filled here with every module the gateway loads (scripts/warm-compile-cache.ts):
# a module found there is not type-stripped again, so the gateway's threads never load the type
# stripper (≈18 MB of RSS in each of the event loop, the database thread and the checkpoint thread).
# Node keeps one cache per user id, so it is filled as `node`, then made read-only for it like the code.
ENV NODE_COMPILE_CACHE=/app/.compile-cache
COPY scripts/warm-compile-cache.ts ./scripts/
RUN mkdir /app/.compile-cache && chown node:node /app/.compile-cache
USER node
RUN node --disable-warning=ExperimentalWarning scripts/warm-compile-cache.ts
USER root
RUN chown -R root:root /app/.compile-cache && chmod -R a+rX,go-w /app/.compile-cache
VOLUME /app/data
USER node
EXPOSE 8080
# slim has no curl: src/healthcheck.ts asks /healthz where the configuration (PORT, HOST or the
# config file's server section) says the gateway listens.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["node", "--disable-warning=ExperimentalWarning", "src/healthcheck.ts"]
# The gateway handles SIGTERM itself (drains in-flight requests), so it can run as PID 1. docker
# stop waits 10 s by default before SIGKILL, less than the 30 s shutdown grace: run with
# --stop-timeout 35 (compose: stop_grace_period: 35s), or lower GATEWAY_SHUTDOWN_GRACE_MS.
STOPSIGNAL SIGTERM
CMD ["node", "--disable-warning=ExperimentalWarning", "src/server.ts"]
