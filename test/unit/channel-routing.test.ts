/**
 * ChannelRegistry's candidates by API shape, and routeCandidates' answer when a model is served only by the other
 * API's channels: exact names and `*` channels alike, disabled channels never counted.
 */
import { describe, expect, it } from 'vitest';
import { ChannelRegistry } from '../../packages/gateway/src/channels.js';
import { parseConfig } from '../../packages/gateway/src/config.js';
import { HttpError } from '../../packages/gateway/src/http-errors.js';
import { routeCandidates, shapeOf } from '../../packages/gateway/src/proxy/request.js';

const real = (id: string, type: 'openai' | 'anthropic', models: string[], extra: object = {}) => ({
  id,
  type,
  base_url: 'https://upstream.invalid',
  key: 'k',
  models,
  ...extra,
});

const config = parseConfig(
  {
    channels: [
      real('oa', 'openai', ['gpt-x', 'shared']),
      real('an', 'anthropic', ['claude-x', 'shared']),
      { id: 'mk', type: 'mock', models: ['shared', 'mock-x'] },
      real('an-any', 'anthropic', ['*'], { groups: ['wild'] }),
      real('oa-off', 'openai', ['claude-x'], { enabled: false }),
    ],
  },
  'unit',
);
const registry = new ChannelRegistry(config.channels, config.tokens);
const ids = (group: string, model: string, shape: 'openai' | 'anthropic') =>
  registry
    .candidates(group, model, shape)
    .map((c) => c.id)
    .sort();

function refusal(group: string, model: string, path: string): HttpError {
  try {
    routeCandidates(registry, group, model, shapeOf(path), path);
  } catch (err) {
    if (err instanceof HttpError) return err;
    throw err;
  }
  throw new Error(`${path} ${model}: expected an HttpError`);
}

describe('candidates by API shape', () => {
  it('openai channels for OpenAI routes, anthropic for /v1/messages, mock for both', () => {
    expect(ids('default', 'shared', 'openai')).toEqual(['mk', 'oa']);
    expect(ids('default', 'shared', 'anthropic')).toEqual(['an', 'mk']);
    expect(ids('default', 'mock-x', 'openai')).toEqual(['mk']);
    expect(ids('default', 'mock-x', 'anthropic')).toEqual(['mk']);
    expect(ids('default', 'claude-x', 'openai')).toEqual([]); // the openai channel naming it is disabled
    expect(ids('wild', 'anything', 'anthropic')).toEqual(['an-any']);
    expect(ids('wild', 'anything', 'openai')).toEqual([]);
  });

  it('a model only the other API serves is wrong_api_type (400); one nobody serves is model_not_found (404)', () => {
    const toMessages = refusal('default', 'claude-x', '/v1/responses');
    expect([toMessages.code, toMessages.status]).toEqual(['wrong_api_type', 400]);
    expect(toMessages.message).toContain('POST /v1/responses (the OpenAI API) needs an openai channel');
    expect(toMessages.message).toContain('send the request to POST /v1/messages');

    const toOpenAI = refusal('default', 'gpt-x', '/v1/messages');
    expect(toOpenAI.code).toBe('wrong_api_type');
    expect(toOpenAI.message).toContain('only by openai channels');
    expect(toOpenAI.message).toContain('send the request to POST /v1/chat/completions');

    // a `*` channel of the other API counts as serving the model
    expect(refusal('wild', 'anything', '/v1/chat/completions').code).toBe('wrong_api_type');
    expect(refusal('default', 'nobody', '/v1/messages').code).toBe('model_not_found');
    expect(refusal('vip', 'shared', '/v1/chat/completions').code).toBe('model_not_found');
    expect(
      routeCandidates(registry, 'default', 'shared', 'anthropic', '/v1/messages').map((c) => c.id),
    ).toEqual(['an', 'mk']);
  });
});
