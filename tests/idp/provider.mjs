// The OpenID Provider the tests sign in with: npm `oidc-provider` on 127.0.0.1, driven by tests/idp_support.py.
//
//   node provider.mjs <path of oidc-provider's package folder> <config.json>
//
// It listens on a free port of 127.0.0.1, then prints one line to stdout: {"issuer": "http://127.0.0.1:PORT"}.
// config.json (written by idp_support.py) holds the clients, the users' claims, the signing keys (private JWKs,
// made by the tests so they can also sign tokens of their own), which of them the JWKS publishes, and which
// signs access tokens. Beside the provider's own routes, /_test/* lets a test change that state while it runs:
//   PUT /_test/users/{sub}   {"groups": [...], ...}   the claims of that user's next tokens
//   PUT /_test/keys          {"published": [kid...], "sign": {"alg": "...", "kid": "..."}}
//   PUT /_test/jwks          {"status", "body", "pad", "delay_ms", "location"}: how /jwks misbehaves ({} = not)
//   PUT /_test/tokens        {"ttl": seconds}   the lifetime of the next access tokens
//   PUT /_test/reset         {}   everything above as it was at the start, and the counts at zero
//   GET /_test/state         all of the above, and how often /jwks was fetched and each grant succeeded
// Access tokens are JWTs (at+jwt) for any resource indicator (RFC 8707), `aud` = the resource; the token-exchange
// grant (RFC 8693) turns a token this provider issued into one for another audience, same `sub`.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [packageDir, configPath] = process.argv.slice(2);
const config = JSON.parse(readFileSync(configPath, 'utf8'));
const { default: Provider, errors } = await import(pathToFileURL(join(packageDir, 'lib', 'index.js')).href);
// jose is oidc-provider's own dependency: resolved from there.
const jose = await import(pathToFileURL(createRequire(join(packageDir, 'package.json')).resolve('jose')).href);

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
const JWT_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:jwt';

const fresh = () => ({
  users: structuredClone(config.users), // sub -> claims (groups, email, ...); any other login gets groups []
  published: new Set(config.published),
  sign: config.sign, // {alg, kid} for access tokens
  jwks: {}, // how /jwks misbehaves: {status, body, pad, delay_ms, location}
  ttl: config.access_token_ttl,
  counts: { jwks: 0, grants: {} },
});
let state = fresh();
const publicKeys = config.keys.map(({ d, p, q, dp, dq, qi, ...pub }) => pub);

function claimsOf(sub) {
  const own = state.users[sub] ?? {};
  return { email: `${sub}@example.test`, groups: [], ...own, sub };
}

function requestedScopes(ctx) {
  const words = `${ctx.oidc.params?.scope ?? ''}`.split(' ').filter(Boolean);
  return [...new Set([...config.resource_scopes, ...words])].join(' ');
}

// Every resource indicator is a resource server whose access tokens are JWTs with `aud` = the resource.
function resourceServerInfo(ctx, resource) {
  return {
    audience: resource,
    scope: requestedScopes(ctx),
    accessTokenFormat: 'jwt',
    accessTokenTTL: state.ttl,
    jwt: { sign: { ...state.sign } },
  };
}

const server = createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: config.clients,
  jwks: { keys: config.keys },
  cookies: { keys: [config.cookie_key] },
  claims: {
    openid: ['sub', 'groups'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
  },
  conformIdTokenClaims: false, // the ID token carries the claims of its scopes (groups), as most IdPs do
  // Resource scopes are listed too: the MCP SDKs register clients with the scopes the resource advertises.
  scopes: ['openid', 'offline_access', 'email', 'profile', ...config.resource_scopes],
  async findAccount(ctx, sub) {
    return {
      accountId: sub,
      async claims() {
        return { name: sub, preferred_username: sub, email_verified: true, ...claimsOf(sub) };
      },
    };
  },
  async extraTokenClaims(ctx, token) {
    const extra = {};
    if (token.accountId) {
      const { sub, ...claims } = claimsOf(token.accountId);
      Object.assign(extra, claims);
    }
    if (token.gty === TOKEN_EXCHANGE) {
      extra.act = { sub: token.clientId }; // RFC 8693 4.1: who acts on behalf of the subject
    }
    return extra;
  },
  features: {
    devInteractions: { enabled: true }, // any login name, any password; then a consent page
    clientCredentials: { enabled: true },
    registration: { enabled: true }, // open dynamic client registration (the MCP SDKs' OAuth clients use it)
    introspection: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: (ctx, client, oneOf) => oneOf,
      useGrantedResource: () => true,
      getResourceServerInfo: resourceServerInfo,
    },
  },
  clientBasedCORS: () => true,
  pkce: { required: () => true },
  ttl: {
    AccessToken: (ctx, token) => token.resourceServer?.accessTokenTTL ?? state.ttl,
    ClientCredentials: (ctx, token) => token.resourceServer?.accessTokenTTL ?? state.ttl,
    IdToken: 600,
    Interaction: 600,
    Session: 3600,
    Grant: 3600,
    AuthorizationCode: 60,
    RefreshToken: 3600,
  },
});

async function exchange(ctx) {
  const { params, client } = ctx.oidc;
  const { InvalidGrant, InvalidRequest, InvalidTarget } = errors;
  if (!params.subject_token) throw new InvalidRequest('missing subject_token');
  if (![ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE].includes(params.subject_token_type)) {
    throw new InvalidRequest('unsupported subject_token_type');
  }
  let subject;
  try {
    ({ payload: subject } = await jose.jwtVerify(
      params.subject_token, jose.createLocalJWKSet({ keys: publicKeys }), { issuer },
    ));
  } catch (err) {
    throw new InvalidGrant(`subject_token is not valid: ${err.code ?? err.message}`);
  }
  if (typeof subject.sub !== 'string') throw new InvalidGrant('subject_token has no sub');
  const target = params.resource ?? params.audience;
  if (!target) throw new InvalidTarget('a resource or audience is required');
  const resourceServer = new provider.ResourceServer(target, resourceServerInfo(ctx, target));
  const wanted = `${params.scope ?? subject.scope ?? ''}`.split(' ').filter(Boolean);
  const token = new provider.AccessToken({
    accountId: subject.sub,
    client,
    gty: TOKEN_EXCHANGE,
    scope: wanted.join(' ') || undefined,
  });
  token.resourceServer = resourceServer;
  const value = await token.save();
  ctx.body = {
    access_token: value,
    issued_token_type: ACCESS_TOKEN_TYPE,
    token_type: 'Bearer',
    expires_in: token.expiration,
    ...(token.scope ? { scope: token.scope } : {}),
  };
}

provider.registerGrantType(TOKEN_EXCHANGE, exchange, [
  'subject_token', 'subject_token_type', 'actor_token', 'actor_token_type', 'requested_token_type',
  'audience', 'resource', 'scope',
]);

async function readJson(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : {};
}

function control(req, res, body) {
  const url = new URL(req.url, issuer);
  const user = url.pathname.match(/^\/_test\/users\/([^/]+)$/);
  if (req.method === 'PUT' && user) {
    state.users[decodeURIComponent(user[1])] = body;
  } else if (req.method === 'PUT' && url.pathname === '/_test/keys') {
    if (body.published) state.published = new Set(body.published);
    if (body.sign) state.sign = body.sign;
  } else if (req.method === 'PUT' && url.pathname === '/_test/jwks') {
    state.jwks = body;
  } else if (req.method === 'PUT' && url.pathname === '/_test/reset') {
    state = fresh();
  } else if (req.method === 'PUT' && url.pathname === '/_test/tokens') {
    state.ttl = body.ttl ?? config.access_token_ttl;
  } else if (!(req.method === 'GET' && url.pathname === '/_test/state')) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ ...state, published: [...state.published] }));
}

// A JWKS answer the way a test asked for it: late, another status, a body of its own (padded), a redirect.
async function misbehave(ctx) {
  const { status, body, pad, delay_ms: delay, location } = state.jwks;
  if (delay) await new Promise((resolve) => { setTimeout(resolve, delay); });
  if (location) {
    ctx.status = 302;
    ctx.set('location', location);
    return true;
  }
  if (status === undefined && body === undefined && !pad) return false;
  ctx.status = status ?? 200;
  ctx.type = 'application/json';
  const text = body ?? JSON.stringify({ keys: publicKeys.filter((key) => state.published.has(key.kid)) });
  ctx.body = `${' '.repeat(pad ?? 0)}${text}`;
  return true;
}

// Around the provider's routes: the JWKS publishes only the published keys (so a test can sign with a key
// the JWKS does not list yet, then rotate); RFC 8414 metadata at its own well-known path; no web fonts
// from the internet in the dev pages (nothing leaves the machine, even from Chromium).
provider.use(async (ctx, next) => {
  if (ctx.path === '/.well-known/oauth-authorization-server') ctx.path = '/.well-known/openid-configuration';
  if (ctx.path === '/jwks') {
    state.counts.jwks += 1;
    if (await misbehave(ctx)) return;
  }
  await next();
  if (ctx.path === '/jwks' && ctx.status === 200) {
    ctx.body = { keys: publicKeys.filter((key) => state.published.has(key.kid)) };
  } else if (ctx.type === 'text/html' && typeof ctx.body === 'string') {
    ctx.body = ctx.body.replace(/@import url\([^)]*\);/g, '');
  }
});

// What went wrong reaches the tests through stderr (idp_support.py shows its tail with every failure).
provider.on('server_error', (ctx, err) => console.error('server_error', ctx.method, ctx.path, err));
for (const event of ['authorization.error', 'grant.error', 'registration_create.error', 'introspection.error']) {
  provider.on(event, (ctx, err) => console.error(event, err.message, err.error_description ?? ''));
}

provider.on('grant.success', (ctx) => {
  const type = ctx.oidc.params.grant_type;
  state.counts.grants[type] = (state.counts.grants[type] ?? 0) + 1;
});

const handle = provider.callback();
server.on('request', async (req, res) => {
  if (!req.url.startsWith('/_test/')) {
    handle(req, res);
    return;
  }
  try {
    control(req, res, await readJson(req));
  } catch (err) {
    res.writeHead(400, { 'content-type': 'text/plain' }).end(String(err));
  }
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
process.stdout.write(`${JSON.stringify({ issuer })}\n`);
