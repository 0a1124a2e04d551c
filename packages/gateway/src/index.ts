/** slotgate-gateway: an OpenAI/Anthropic-compatible gateway on slotgate, to embed; docs/api.md lists this surface. */
export { createGateway, type Gateway, type GatewayOptions } from './server.js';
export { CLIENT_ROUTES } from './routes/client.js';
export { ConfigError, loadConfigFile, parseConfig, parseConfigText } from './config.js';
export type { GatewayConfig, ChannelConfig, TokenConfig, MockConfig } from './config-schema.js';
export {
  GATEWAY_SETTINGS,
  gatewaySettings,
  type GatewaySettings,
  type GatewaySettingsUpdate,
} from './settings.js';
export { GATEWAY_ERRORS, type GatewayErrorCode } from './http-errors.js';
export type { ProxyResult } from './proxy/context.js';
