// An MCP client with OAuth, as TypeScript applications write one: the MCP TypeScript SDK's `Client` over its
// `StreamableHTTPClientTransport` with an `OAuthClientProvider`, run by tests/e2e/oauth_clients.py. Either SDK line:
// v2 (npm @modelcontextprotocol/client: both protocol eras) or v1 (npm @modelcontextprotocol/sdk: 2025-11-25 only).
//
//   node mcp_oauth_client.mjs <package folder of the SDK> <spec JSON>
//
// spec: {"sdk": "v1" | "v2", "url": MCP endpoint, "mode": "legacy" | "2026-07-28", "tool": name, "arguments": {...},
//        "held": {"client_information": {...}, "tokens": {...}}}  (held: what the provider holds from before)
// The SDK does the discovery (401 → protected resource metadata → authorization server metadata), the dynamic
// client registration, PKCE and the token request itself. Where a person's browser would open, this prints
// {"authorize": URL} and reads one line back, {"redirect": URL}: the test drives the provider's sign-in over
// HTTP and answers with the URL the provider sent the browser back to. Every other line it prints is an event
// ({"registered": client_id}, {"tokens": scope}, {"response": [method, url, status, WWW-Authenticate,
// MCP-Protocol-Version sent]} for each HTTP answer the SDK got) and the last one {"result": CallToolResult} or {"error": ...}.
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [packageDir, specText] = process.argv.slice(2);
const spec = JSON.parse(specText);
const load = (file) => import(pathToFileURL(join(packageDir, file)).href);
const [{ Client }, { StreamableHTTPClientTransport }, { UnauthorizedError }] = spec.sdk === 'v1'
  ? await Promise.all(['dist/esm/client/index.js', 'dist/esm/client/streamableHttp.js', 'dist/esm/client/auth.js']
    .map(load))
  : await load('dist/index.mjs').then((sdk) => [sdk, sdk, sdk]);

const REDIRECT = 'http://127.0.0.1:9/callback'; // never visited: the test reads the code from the provider's answer
const MAX_SIGN_INS = 3; // the first sign-in, and a step-up or two for missing scopes

const emit = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

class Provider {
  constructor(held) {
    this.registered = held?.client_information;
    this.saved = held?.tokens;
    this.verifier = undefined;
    this.authorizeUrl = undefined;
  }
  get redirectUrl() { return REDIRECT; }
  get clientMetadata() {
    return { client_name: 'gateway e2e (TypeScript SDK)', redirect_uris: [REDIRECT],
             grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'],
             token_endpoint_auth_method: 'none' };
  }
  clientInformation() { return this.registered; }
  saveClientInformation(info) { this.registered = info; emit({ registered: info.client_id }); }
  tokens() { return this.saved; }
  saveTokens(tokens) { this.saved = tokens; emit({ tokens: tokens.scope ?? '' }); }
  redirectToAuthorization(url) { this.authorizeUrl = url.href; }
  saveCodeVerifier(verifier) { this.verifier = verifier; }
  codeVerifier() { return this.verifier; }
}

const provider = new Provider(spec.held);
let lastRefusal; // the last error that made the client sign in again

async function recordingFetch(input, init) {
  const response = await fetch(input, init);
  const url = typeof input === 'string' ? input : input.url ?? String(input);
  const version = new Headers(init?.headers ?? {}).get('mcp-protocol-version') ?? '';
  emit({ response: [init?.method ?? 'GET', url, response.status, response.headers.get('www-authenticate') ?? '',
                    version] });
  return response;
}
const mode = spec.mode === 'legacy' ? 'legacy' : { pin: spec.mode };

async function signIn(transport) {
  if (provider.authorizeUrl === undefined) throw new Error('refused, and no sign-in was started');
  emit({ authorize: provider.authorizeUrl });
  provider.authorizeUrl = undefined;
  const { value } = await lines.next();
  const redirect = new URL(JSON.parse(value).redirect);
  // v2 takes the callback's parameters (it checks `iss`, RFC 9207), v1 the code
  await transport.finishAuth(spec.sdk === 'v1' ? redirect.searchParams.get('code') : redirect.searchParams);
}

async function callOnce() {
  const transport = new StreamableHTTPClientTransport(new URL(spec.url), { authProvider: provider,
                                                                           fetch: recordingFetch });
  const options = spec.sdk === 'v1' ? {} : { versionNegotiation: { mode } };
  const client = new Client({ name: 'gateway-e2e-ts', version: '1.0.0' }, options);
  try {
    await client.connect(transport);
    return await client.callTool({ name: spec.tool, arguments: spec.arguments ?? {} });
  } catch (error) {
    if (error instanceof UnauthorizedError || provider.authorizeUrl !== undefined) {
      lastRefusal = `${error?.name}: ${error?.message}`;
      await signIn(transport);
      return undefined;
    }
    throw error;
  } finally {
    await client.close().catch(() => {});
  }
}

try {
  let result;
  for (let attempt = 0; result === undefined && attempt <= MAX_SIGN_INS; attempt++) result = await callOnce();
  if (result === undefined) throw new Error(`still refused after ${MAX_SIGN_INS} sign-ins (${lastRefusal})`);
  emit({ result });
} catch (error) {
  emit({ error: { name: error?.name, message: String(error?.message ?? error), status: error?.status ?? error?.code } });
}
process.exit(0);
