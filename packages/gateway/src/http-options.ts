/**
 * The Fastify options that guard connections before any route runs: the request id a client may choose, time-outs
 * that bound receiving a request (never sending its response), and slotgate's answer to a connection-level error.
 */
import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type IncomingMessage, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyBaseLogger, FastifyHttpOptions } from 'fastify';
import type { GatewayConfig } from './config-schema.js';
import { HttpError, errorBody } from './http-errors.js';

/** A client's `x-request-id` is kept only in this shape; anything else gets a fresh UUID. */
export const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The client's `x-request-id` when it is safe to log and echo, else a fresh UUID. */
export function requestId(request: IncomingMessage): string {
  const given = request.headers['x-request-id'];
  return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
}

/**
 * The request id as every answer carries it: `x-request-id`, and the same value as `request-id`, the header the
 * Anthropic SDK reads (`err.requestID`, `_request_id`). Both replace any an upstream sent. A client's `request-id` is
 * not read: only its `x-request-id` (see requestId).
 */
export function requestIdHeaders(id: string): Record<'x-request-id' | 'request-id', string> {
  return { 'x-request-id': id, 'request-id': id };
}

/** How often Node checks the request time-outs: its default, 30 s, would let a 10 s time-out run to 40 s. */
export function checkingIntervalMs(server: GatewayConfig['server']): number {
  return Math.min(1000, Math.ceil(Math.min(server.headers_timeout_ms, server.request_timeout_ms) / 4));
}

/**
 * The request time-outs run until the request has been received whole, so a response streaming for an hour is never
 * cut. The socket inactivity time-out stays off: it would cut a silent stream (timeouts.idle_ms bounds that gap).
 */
export function timeoutOptions(server: GatewayConfig['server']): FastifyHttpOptions<Server> {
  return {
    requestTimeout: server.request_timeout_ms,
    keepAliveTimeout: server.keep_alive_timeout_ms,
    connectionTimeout: 0,
    http: {
      headersTimeout: server.headers_timeout_ms,
      connectionsCheckingInterval: checkingIntervalMs(server),
    },
  };
}

/** A connection-level error as slotgate answers it. */
function clientHttpError(code: string): HttpError {
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT')
    return new HttpError(
      'request_timeout',
      'the request did not arrive in time (server.headers_timeout_ms / server.request_timeout_ms)',
    );
  if (code === 'HPE_HEADER_OVERFLOW')
    return new HttpError('request_too_large', 'the request headers are larger than 16 KiB');
  return new HttpError('invalid_request_error', 'the request is not valid HTTP/1.1');
}

/** Like Node's own, it answers only on a connection that has written nothing yet, then closes it. */
export function clientErrorHandler(log: () => FastifyBaseLogger) {
  return (err: Error & { code?: string }, socket: Socket): void => {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    const error = clientHttpError(err.code ?? '');
    log().debug({ code: err.code, answer: error.code }, 'connection error');
    if (socket.writable && socket.bytesWritten === 0) {
      const body = JSON.stringify(errorBody(error, 'openai'));
      socket.write(
        `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status]}\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    }
    socket.destroy();
  };
}
