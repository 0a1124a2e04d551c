/**
 * What the gateway reads from a client request before admission: the API shape of the route, the caller's token and
 * the JSON body. The body arrives as raw bytes (one content-type parser for every route) and is forwarded as-is.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ChannelRegistry, GatewayChannel } from '../channels.js';
import { HttpError, echo, type ApiShape } from '../http-errors.js';
import { newAccessRecord } from '../logging.js';
import type { ProxyContext } from './context.js';
import { RetryChain } from './retry.js';

/** Whose token a route reads: a client API shape, or the admin API (`Authorization: Bearer` only). */
export type TokenReader = ApiShape | 'admin';

const BEARER = /^bearer\s+/i;

export function shapeOf(url: string): ApiShape {
  return url.startsWith('/v1/messages') ? 'anthropic' : 'openai';
}

/** What each API shape is called in messages, the channel type it needs, and the route a client should use for it. */
const API: Record<ApiShape, { name: string; channel: string; route: string }> = {
  openai: {
    name: 'the OpenAI API',
    channel: 'an openai',
    route: 'POST /v1/chat/completions (or another OpenAI route)',
  },
  anthropic: { name: 'the Anthropic Messages API', channel: 'an anthropic', route: 'POST /v1/messages' },
};

/**
 * The channels serving `model` for `group` that speak the route's API. None: 404 `model_not_found`, or 400
 * `wrong_api_type` naming the route to use when channels of the other API serve the model.
 */
export function routeCandidates(
  registry: ChannelRegistry,
  group: string,
  model: string,
  shape: ApiShape,
  path: string,
): GatewayChannel[] {
  const candidates = registry.candidates(group, model, shape);
  if (candidates.length > 0) return candidates;
  const other: ApiShape = shape === 'openai' ? 'anthropic' : 'openai';
  if (registry.candidates(group, model, other).length > 0) {
    throw new HttpError(
      'wrong_api_type',
      `model ${echo(model)} is served for this API key's group only by ${other} channels, and POST ${path} ` +
        `(${API[shape].name}) needs ${API[shape].channel} channel: send the request to ${API[other].route}`,
    );
  }
  throw new HttpError('model_not_found', `no channel serves model ${echo(model)} for this API key's group`);
}

/**
 * The token the caller presents: `Authorization: Bearer` first; then `x-api-key`, on Anthropic routes beside any other
 * Authorization scheme, on OpenAI routes only without one, on admin routes never.
 */
export function presentedToken(request: FastifyRequest, reader: TokenReader): string | undefined {
  const auth = request.headers.authorization;
  if (typeof auth === 'string' && BEARER.test(auth)) return auth.replace(BEARER, '').trim();
  if (reader === 'admin') return undefined;
  const apiKey = request.headers['x-api-key'];
  if (typeof apiKey === 'string' && (reader === 'anthropic' || !auth)) return apiKey.trim();
  return undefined;
}

function decodeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new HttpError('invalid_request_error', 'the request body is not valid JSON');
  }
}

/** Deepest nesting of arrays and objects an admin body may have: its values are flat, and deeper input is an attack. */
export const ADMIN_JSON_MAX_DEPTH = 32;

/** Whether `value` nests arrays or objects deeper than `max` levels (walked without recursion). */
function nestedDeeperThan(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (depth > max) return true;
    for (const child of Object.values(v)) stack.push([child, depth + 1]);
  }
  return false;
}

/** An admin request body as JSON; a missing body, or one nested deeper than ADMIN_JSON_MAX_DEPTH, is an error. */
export function parseJson(raw: unknown): unknown {
  if (raw === undefined || raw === null)
    throw new HttpError('invalid_request_error', 'the request body is empty; expected a JSON object');
  const json = decodeJson(Buffer.isBuffer(raw) ? raw.toString('utf8') : String(raw));
  if (nestedDeeperThan(json, ADMIN_JSON_MAX_DEPTH)) {
    throw new HttpError(
      'invalid_request_error',
      `the request body nests arrays or objects deeper than ${ADMIN_JSON_MAX_DEPTH} levels`,
    );
  }
  return json;
}

/** What a JSON value is, for messages: `null`, `an array`, `a number`, … */
export function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

/** A client API body: the bytes to forward and the JSON object they hold, with a non-empty string `model`. */
export function parseBody(raw: unknown): { body: Buffer; json: Record<string, unknown> } {
  const body = Buffer.isBuffer(raw) ? raw : Buffer.from(typeof raw === 'string' ? raw : '');
  const json = decodeJson(body.toString('utf8'));
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new HttpError('invalid_request_error', 'the request body must be a JSON object');
  }
  const model = (json as Record<string, unknown>).model;
  if (typeof model !== 'string' || model.length === 0) {
    throw new HttpError('invalid_request_error', 'the request body has no `model` (a non-empty string)');
  }
  return { body, json: json as Record<string, unknown> };
}

/** A client API request as the proxy carries it through its attempts: authenticated, parsed and routed. */
export type ProxiedRequest = ReturnType<typeof openRequest>;

export function openRequest(ctx: ProxyContext, request: FastifyRequest, reply: FastifyReply, path: string) {
  const shape = shapeOf(path);
  const access = (request.access = newAccessRecord());
  const registry = ctx.registry();
  const key = presentedToken(request, shape);
  const caller = registry.authenticate(key);
  if (!caller) throw new HttpError('invalid_api_key', 'missing or invalid API key');
  access.token = caller.name;
  const { body, json } = parseBody(request.body);
  const model = (access.model = json.model as string);
  const candidates = routeCandidates(registry, caller.group, model, shape, path);
  // One signal per request ends waiting and the upstream call: the client going away, or the slot of the attempt in
  // flight being lost (past that point another request may hold it). A lost slot ends the request.
  const stop = new AbortController();
  const req = {
    ctx,
    request,
    reply,
    path,
    shape,
    access,
    key,
    caller,
    body,
    json,
    candidates,
    stop,
    chain: new RetryChain(ctx, request.log, ctx.config().retry),
    /** The channels serving the request under the configuration in force: a retry, and a wait, follow a reload. */
    inForce: () => ctx.registry().candidates(caller.group, model, shape),
    onLost: () => stop.abort(),
    clientGone: false,
  };
  reply.raw.on('close', () => {
    if (reply.raw.writableFinished) return;
    req.clientGone = true;
    stop.abort();
  });
  return req;
}
