/**
 * Certificates for a TLS redis-server, made with openssl in a temporary folder: a CA, a server certificate for
 * localhost and 127.0.0.1, and a client certificate, all signed by the CA.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TestCerts {
  dir: string;
  /** Paths of the PEM files. */
  files: { ca: string; serverCert: string; serverKey: string; clientCert: string; clientKey: string };
  /** The PEMs a client needs. */
  ca: string;
  cert: string;
  key: string;
  remove(): void;
}

export function makeCerts(): TestCerts {
  const dir = mkdtempSync(join(tmpdir(), 'slotgate-tls-'));
  const at = (name: string) => join(dir, name);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const sign = (name: string, ext?: string) =>
    openssl(
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-days',
      '2',
      '-out',
      `${name}.crt`,
      ...(ext ? ['-extfile', ext] : []),
    );
  const request = (name: string, cn: string) =>
    openssl(
      'req',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-subj',
      `/CN=${cn}`,
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.csr`,
    );
  openssl(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-days',
    '2',
    '-subj',
    '/CN=slotgate-test-ca',
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
  );
  request('server', 'localhost');
  writeFileSync(at('san.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  sign('server', 'san.ext');
  request('client', 'slotgate-client');
  sign('client');
  const files = {
    ca: at('ca.crt'),
    serverCert: at('server.crt'),
    serverKey: at('server.key'),
    clientCert: at('client.crt'),
    clientKey: at('client.key'),
  };
  return {
    dir,
    files,
    ca: readFileSync(files.ca, 'utf8'),
    cert: readFileSync(files.clientCert, 'utf8'),
    key: readFileSync(files.clientKey, 'utf8'),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** redis-server arguments for a TLS port that requires a client certificate signed by the CA. */
export function tlsServerArgs(certs: TestCerts, tlsPort: number): string[] {
  const { files } = certs;
  return [
    '--tls-port',
    String(tlsPort),
    '--tls-cert-file',
    files.serverCert,
    '--tls-key-file',
    files.serverKey,
    '--tls-ca-cert-file',
    files.ca,
    '--tls-auth-clients',
    'yes',
  ];
}
