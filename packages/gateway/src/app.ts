/**
 * The gateway's HTTP surface: one Fastify instance with its hooks, error handlers, body parser and every route, built
 * from explicit dependencies. It opens no port and no store connection, so tests drive it through `app.inject()`.
 */
import Fastify, {
  LogController,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import { Drain, shuttingDown } from './drain.js';
import { HttpError, echo, errorBody, toHttpError } from './http-errors.js';
import { clientErrorHandler, requestId, requestIdHeaders, timeoutOptions } from './http-options.js';
import { logAccess, loggerOptions, noteError } from './logging.js';
import type { GatewayMetrics } from './metrics.js';
import type { ProxyResult } from './proxy/context.js';
import { shapeOf } from './proxy/request.js';
import { registerAdminRoutes, type AdminContext } from './routes/admin.js';
import { CLIENT_ROUTES, registerClientRoutes } from './routes/client.js';
import { registerOpenRoutes } from './routes/open.js';
import type { ReadinessCheck } from './readiness.js';
import type { UpstreamClient } from './upstream.js';

export interface AppDeps extends Omit<AdminContext, 'metrics'> {
  /** GET /readyz: whether this instance should get traffic now, and why not. */
  ready: ReadinessCheck;
  metrics: GatewayMetrics;
  upstream: UpstreamClient;
  /** pino logger options, or false for none. @default from config.server.log_level and log_format */
  logger?: boolean | Record<string, unknown>;
  onResult?: (result: ProxyResult) => void;
  /** The shutdown's drain (server.ts starts it). @default one never started */
  drain?: Drain;
}

/** Apps shutting down through closeApp: each of their connections closes as soon as its last response has ended. */
const draining = new WeakSet<FastifyInstance>();

/** Route parameters (channel ids) as long as the request line: an id too long to exist gets the route's own 404. */
const MAX_PARAM_LENGTH = 16 * 1024;

/** What an error of Fastify's own becomes: a client's mistake is a 4xx in slotgate's shape, never a 500. */
function fastifyHttpError(err: FastifyError, bodyLimit: number): HttpError | undefined {
  if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE')
    return new HttpError('request_too_large', `the request body is larger than ${bodyLimit} bytes`);
  if (err.code === 'FST_ERR_BAD_URL')
    return new HttpError('invalid_request_error', 'the URL is not valid: a malformed percent-encoding');
  if (err.code === 'ECONNRESET')
    return new HttpError(
      'invalid_request_error',
      'the client closed the connection before its request was in',
    );
  const code = String(err.code);
  if (code.startsWith('FST_ERR_CTP') || (code.startsWith('FST_') && (err.statusCode ?? 500) < 500))
    return new HttpError('invalid_request_error', err.message);
  return undefined;
}

/** The client routes' paths, and the prefix of GET /v1/models/{id}. */
const CLIENT_PATHS = new Set<string>([...CLIENT_ROUTES, '/v1/models']);

/**
 * The path a client meant when it names a client route without its `/v1` (an OpenAI SDK whose base URL lacks it) or
 * with it twice (an Anthropic SDK whose base URL has it); else undefined.
 */
export function meantPath(path: string): string | undefined {
  const fixed = path.startsWith('/v1/v1/')
    ? path.slice(3)
    : path.startsWith('/v1/')
      ? undefined
      : `/v1${path}`;
  if (fixed !== undefined && (CLIENT_PATHS.has(fixed) || /^\/v1\/models\/[^/]/.test(fixed))) return fixed;
  return undefined;
}

export function buildApp(deps: AppDeps): FastifyInstance {
  const config = deps.config();
  // Fixed at build time (like the rest of `server`): a reload does not change the limit Fastify enforces.
  const bodyLimit = config.server.body_limit_bytes;

  const answerError = (err: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    // The client left before the first byte of a streamed answer (Fastify writes the headers with it): the body was
    // ended for it, nobody is there to answer, and it is no gateway error.
    if (err.code === 'ERR_STREAM_PREMATURE_CLOSE' && reply.raw.destroyed) {
      request.log.debug('the client left before the first byte of its answer');
      return;
    }
    const shape = shapeOf(request.url);
    const httpError = fastifyHttpError(err, bodyLimit) ?? toHttpError(err);
    if (httpError.code === 'internal_error') request.log.error({ err }, 'internal error');
    if (request.url.startsWith('/v1/')) deps.metrics.traffic.countResponse('gateway', httpError.status);
    noteError(request, httpError.code, err);
    if (reply.sent || reply.raw.headersSent) return;
    // frameworkErrors answer outside the hooks: the request id is set here for them
    void reply
      .code(httpError.status)
      .headers({ ...httpError.headers, ...requestIdHeaders(request.id) })
      .send(errorBody(httpError, shape));
  };

  const logger = loggerOptions(config.server, deps.logger);
  const app: FastifyInstance = Fastify({
    logger,
    // one access line of our own per request (logging.ts) instead of Fastify's two
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit,
    requestIdHeader: false,
    genReqId: requestId,
    forceCloseConnections: 'idle',
    // the drain answers requests that come during a close itself, in slotgate's error shape
    return503OnClosing: false,
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    frameworkErrors: (err, request, reply) => answerError(err, request, reply),
    clientErrorHandler: clientErrorHandler(() => app.log),
    ...timeoutOptions(config.server),
  });

  // One parser for every body: the raw bytes, forwarded as-is; the handlers parse what they need.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));

  app.decorateRequest('access', null);
  if (logger !== false) {
    // 'close' comes once the response has ended (after 'finish'), or when the client left first
    app.addHook('onRequest', (request, reply, done) => {
      reply.raw.once('close', () => logAccess(request, reply));
      done();
    });
  }
  const drain = deps.drain ?? new Drain();
  app.addHook('onRequest', (_request, _reply, done) => done(drain.closing ? shuttingDown() : undefined));

  // (callback hooks: an async hook costs a promise and a microtask on every request)
  app.addHook('onSend', (request, reply, payload, done) => {
    reply.headers(requestIdHeaders(request.id)).header('x-content-type-options', 'nosniff');
    done(null, payload);
  });

  app.addHook('onResponse', (_request, _reply, done) => {
    if (draining.has(app)) setImmediate(() => app.server.closeIdleConnections());
    done();
  });

  app.setErrorHandler(answerError);

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0]!;
    const meant = meantPath(path);
    const hint =
      meant === undefined
        ? ''
        : `; did you mean ${echo(meant)}? The client routes are under /v1: an OpenAI SDK's base URL ends in /v1 ` +
          `(http://host:port/v1), an Anthropic SDK's does not (http://host:port)`;
    const err = new HttpError('not_found', `no route ${request.method} ${echo(path)}${hint}`);
    noteError(request, err.code);
    // in the shape of the route meant, so an Anthropic SDK that doubled the /v1 reads it
    void reply.code(404).send(errorBody(err, shapeOf(meant ?? path)));
  });

  const traffic = deps.metrics.traffic;
  registerClientRoutes(app, {
    ...deps,
    drain,
    metrics: traffic,
    onResult: (result) => {
      traffic.countResponse(result.source, result.status);
      deps.onResult?.(result);
    },
  });
  const ready: ReadinessCheck = async () =>
    drain.draining ? { ready: false, reason: 'shutting down: draining its requests' } : deps.ready();
  registerOpenRoutes(app, ready, deps.metrics);
  registerAdminRoutes(app, { ...deps, metrics: traffic });
  return app;
}

/**
 * Stops accepting and waits for in-flight requests, up to `forceAfterMs`, then drops every connection. Closing drops
 * only the connections idle at that moment, so while draining each one is dropped as soon as its last response ends.
 */
export async function closeApp(app: FastifyInstance, forceAfterMs: number): Promise<void> {
  draining.add(app);
  const force = setTimeout(() => app.server.closeAllConnections?.(), forceAfterMs);
  force.unref();
  try {
    await app.close();
  } finally {
    clearTimeout(force);
  }
}
