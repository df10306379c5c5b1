"""Limits of who is calling: bearer tokens (JWTs) and the key sets (JWKS) they are checked with."""

# A bearer token longer than this is refused before it is decoded. Access tokens run to a few KiB
# (Entra ID's with many groups reach about 8 KiB); twice that leaves room and still bounds the work.
MAX_BEARER_TOKEN_BYTES = 16 * 1024

# The encoded protected header of a JWT (``alg``, ``typ``, ``kid``): real ones are under 200 bytes.
# It is decoded before the signature is checked, so it is bounded on its own.
MAX_JWT_HEADER_BYTES = 2 * 1024

# A discovery document or a JWKS larger than this is refused (real ones are 1-20 KiB; Entra ID's
# JWKS, among the largest, is about 10 KiB): a hostile or broken IdP cannot make the gateway buffer more.
MAX_JWKS_BYTES = 256 * 1024

# Keys one JWKS may hold; past it the set is refused (IdPs publish two or three during rotation).
MAX_JWKS_KEYS = 64

# One fetch (discovery, then the JWKS) must finish within this long, however the IdP drips its bytes.
JWKS_FETCH_TIMEOUT_SECONDS = 5.0

# Fetches of one issuer's keys start at most this often, whatever asks (a token with an unknown
# ``kid``, a refresh, /readyz): a flood of forged kids costs the IdP one request per interval.
JWKS_MIN_REFETCH_SECONDS = 30.0

# While an issuer has no usable keys (the IdP was down or slow when the gateway started, or the keys
# aged out), a failed fetch is retried in the background after this long, doubling up to
# ``JWKS_MIN_REFETCH_SECONDS``: tokens work again soon after the IdP answers, and the IdP still sees
# at most one request per interval.
JWKS_RETRY_FIRST_SECONDS = 1.0

# Cached keys are refreshed in the background once they are this old (or at half of ``jwks_max_age``
# when that is shorter), so a rotation is picked up without waiting for an unknown ``kid``.
JWKS_REFRESH_SECONDS = 600.0

# Verified tokens are remembered (by their SHA-256) so that a token's next call skips the signature
# check; past this many the oldest are forgotten.
MAX_VERIFIED_TOKENS = 10_000

# The most ``clock_skew`` an issuer may be given: clocks kept by NTP differ by far less, and every second
# of skew is a second an expired token still works.
MAX_CLOCK_SKEW_SECONDS = 300.0
