"""Limits of single sign-on for the approvals page: sign-ins under way, sessions, and the IdP's answers."""

# The longest `approvals.sso.session_lifetime`: an approver whose role is taken away at the IdP keeps
# deciding until their session ends, so a day is the most a config may ask for (the default is 1h).
MAX_SSO_SESSION_SECONDS = 24 * 3600

# A sign-in must come back from the IdP within this many seconds of leaving (the state, nonce and
# PKCE verifier are forgotten after it): long enough to type a password and answer an MFA prompt.
SSO_LOGIN_SECONDS = 600.0

# Sign-ins under way at once. Anyone may start one (GET /approvals/sso/login needs no key), so the
# table is bounded; past it the oldest is dropped, which costs that browser a second try.
MAX_SSO_PENDING_LOGINS = 10_000

# Signed-in approver sessions at once (past it the oldest session ends): far above any approver team.
MAX_SSO_SESSIONS = 10_000

# The IdP's discovery document and token response: at most this many bytes, within this many seconds.
MAX_SSO_RESPONSE_BYTES = 256 * 1024
SSO_HTTP_TIMEOUT_SECONDS = 10.0

# A discovery document is used for this long before it is fetched again (endpoints rarely move).
SSO_DISCOVERY_MAX_AGE_SECONDS = 3600.0
