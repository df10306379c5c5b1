"""The gateway's errors: a small tree, each class with a stable ``code``.

    GatewayError
    ├── PolicyLoadError        a policy set could not be loaded (carries diagnostics)
    ├── ConfigError            the gateway config is wrong (carries diagnostics)
    ├── CelError               the expression language, mapped where CEL enters
    │   ├── CelCompileError    an expression does not parse or type-check
    │   └── CelEvaluationError an expression failed at evaluation time
    ├── TestSuiteError         a policy test suite is malformed
    ├── CredentialError        a credential was presented but cannot be used (401)
    │   ├── AmbiguousCredentials  more than one credential, e.g. a repeated header (400)
    │   └── TokenRefused       a bearer token (JWT) that is not accepted, with a bounded reason (401, or 403)
    ├── ApprovalError          an approver's request cannot be carried out
    │   ├── ApprovalNotFound   no approval request has that id (404)
    │   ├── ApprovalForbidden  this approver may not decide it, e.g. their own call (403)
    │   ├── ApprovalConflict   it was already decided (409)
    │   │   └── EditNotPossible  this request's arguments cannot be edited (409)
    │   ├── EditInvalid        an approver's edited arguments are not ones the tool can take (422)
    │   └── EditRefused        the request-stage policies refuse the edited call (422, naming the rule)
    ├── StoreUnavailable       the database stayed locked (or broke); nothing was changed (503)
    ├── ModelUpstreamError     the model proxy's model upstream failed or answered an error (502, or its 4xx)
    ├── StoreSchemaError       the database was migrated by a newer gateway: refuse to start
    ├── AuditStartError        the audit log cannot be taken up at start: refuse to start
    │   ├── AuditChainBroken   its last line is not a chained event, so its chain cannot be continued
    │   └── AuditLogInUse      another process is writing the file
    └── CallError              one tool call could not be carried out
        ├── UnknownToolError   the tool name resolves to nothing (a protocol error)
        ├── UnknownItemError   a resource or prompt that is unknown, or hidden from the caller (a protocol error)
        ├── ItemRefusedError   policies refused a resource read or prompt get (a protocol error with their message)
        │   └── UnclearUriError  a resource URI that servers could read in more than one way (refused, with why)
        ├── InvalidArgumentsError  arguments fail the tool's input schema
        ├── UpstreamError      the tool's upstream failed, timed out or is down
        │   ├── UpstreamNotReached  the request provably never left the gateway (refused, no route)
        │   │   ├── UpstreamDown    the upstream is down (supervised; retried in the background)
        │   │   └── UpstreamCredentialsError  no credential for the upstream (the IdP refused, or no caller token)
        │   └── ItemNotFound    the upstream does not know the resource or prompt
        └── AuditWriteError    the audit event could not be written (the call fails closed)

Foreign exceptions (YAML, CEL engines, HTTP, MCP) are mapped to these at the boundary
where they enter, with ``raise Mapped(...) from exc``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.core.diagnostics import Diagnostic

__all__ = [
    "AmbiguousCredentials",
    "ApprovalConflict",
    "ApprovalError",
    "ApprovalForbidden",
    "ApprovalNotFound",
    "AuditChainBroken",
    "AuditLogInUse",
    "AuditStartError",
    "AuditWriteError",
    "CallError",
    "CelCompileError",
    "CelError",
    "CelEvaluationError",
    "ConfigError",
    "CredentialError",
    "EditInvalid",
    "EditNotPossible",
    "EditRefused",
    "GatewayError",
    "InvalidArgumentsError",
    "ItemNotFound",
    "ItemRefusedError",
    "ModelUpstreamError",
    "PolicyLoadError",
    "StoreSchemaError",
    "StoreUnavailable",
    "TestSuiteError",
    "TokenRefused",
    "UnclearUriError",
    "UnknownItemError",
    "UnknownToolError",
    "UpstreamCredentialsError",
    "UpstreamDown",
    "UpstreamError",
    "UpstreamNotReached",
]


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""

    code = "gateway-error"


class _DiagnosticsError(GatewayError):
    """An error that carries one or more positioned diagnostics."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(d.format() for d in self.diagnostics))


class PolicyLoadError(_DiagnosticsError):
    """A policy set could not be loaded; ``diagnostics`` says where and why."""

    code = "policy-load"


class ConfigError(_DiagnosticsError):
    """The gateway configuration is invalid; ``diagnostics`` says where and why."""

    code = "config"


class CelError(GatewayError):
    """Base of errors raised by a CEL engine."""

    code = "cel"


class CelCompileError(CelError):
    """An expression failed to parse or type-check; line/column are 1-based, inside the expression."""

    code = "cel-compile"

    def __init__(self, message: str, line: int = 1, column: int = 1, kind: str = "cel-compile") -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.code = kind


class CelEvaluationError(CelError):
    """An expression failed while evaluating (missing key, bad overload, wrong result type)."""

    code = "cel-eval"


class TestSuiteError(_DiagnosticsError):
    """A policy test suite file is malformed."""

    __test__ = False  # not a pytest test class
    code = "test-suite"


class ApprovalError(GatewayError):
    """An approver's request cannot be carried out; ``status`` is the HTTP status to answer."""

    code = "approval"
    status = 400


class ApprovalNotFound(ApprovalError):
    """No approval request has that id."""

    code = "approval-not-found"
    status = 404


class ApprovalForbidden(ApprovalError):
    """The approver may not decide this request (their own call, or not one of its approvers)."""

    code = "approval-forbidden"
    status = 403


class ApprovalConflict(ApprovalError):
    """The request was already decided (or expired)."""

    code = "approval-conflict"
    status = 409


class EditNotPossible(ApprovalConflict):
    """This request's arguments cannot be edited; it may still be approved as asked, or denied."""

    code = "edit-not-possible"
    status = 409


class EditInvalid(ApprovalError):
    """An approver's edited arguments are not ones the tool can take (values, size, input schema); nothing changed."""

    code = "invalid-edit"
    status = 422


class EditRefused(ApprovalError):
    """The request-stage policies refuse the edited call (``rule`` and ``verdict`` say how); nothing changed."""

    code = "edit-refused"
    status = 422

    def __init__(self, message: str, rule: str | None, verdict: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.verdict = verdict


class StoreUnavailable(GatewayError):
    """The database could not be read or written in time (locked by another process, or broken)."""

    code = "store-unavailable"
    status = 503


class StoreSchemaError(GatewayError):
    """The database's schema is newer than this gateway knows (written by a newer version): refuse to start."""

    code = "store-schema"
    status = 503


class AuditStartError(GatewayError):
    """The audit log cannot be taken up at start (its message names the file and what to do): refuse to start."""

    code = "audit-start"


class AuditChainBroken(AuditStartError):
    """The audit file's last line is not a chained event, and ``audit.on_broken_chain`` says stop."""

    code = "audit-chain-broken"


class AuditLogInUse(AuditStartError):
    """Another process holds the audit file: one writer per file, so that each file holds whole chains."""

    code = "audit-log-in-use"


class CallError(GatewayError):
    """One tool call could not be carried out."""

    code = "call"


class UnknownToolError(CallError):
    """The requested tool name is not exposed; the message names only the requested name."""

    code = "unknown-tool"

    def __init__(self, name: str) -> None:
        super().__init__(f"Unknown tool: {name}")
        self.name = name


class UnknownItemError(CallError):
    """A resource or prompt that is not exposed, or hidden from the caller; the message names only what was asked."""

    code = "unknown-item"

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"Unknown {kind}: {name}")
        self.name = name


class ItemRefusedError(CallError):
    """Policies refused a resource read or prompt get; the message is the policy's, for the client."""

    code = "item-refused"


class UnclearUriError(ItemRefusedError):
    """A resource URI that cannot be normalised to one reading (an encoded ``/``, a control character...)."""

    code = "unclear-uri"

    def __init__(self, reason: str) -> None:
        super().__init__(f"This resource URI is refused: {reason}.")
        self.reason = reason


class InvalidArgumentsError(CallError):
    """The (possibly rewritten) arguments fail the tool's input schema."""

    code = "invalid-arguments"


class UpstreamError(CallError):
    """The tool's upstream failed, timed out or is unreachable."""

    code = "upstream"


class ItemNotFound(UpstreamError):
    """The upstream does not know the resource or prompt (the frontend answers as for an unknown one)."""

    code = "item-not-found"


class AuditWriteError(CallError):
    """The audit event could not be written, so the call fails closed."""

    code = "audit-write"


class CredentialError(GatewayError):
    """A credential was presented but cannot be used; never read as 'no credential' (anonymous)."""

    code = "unauthorized"
    status = 401


class AmbiguousCredentials(CredentialError):
    """More than one credential: a repeated header, or both Authorization and X-API-Key."""

    code = "ambiguous-credentials"
    status = 400


# Why a token is refused: a bounded set (a metrics label), each with what the caller is told (exported
# by gateway.auth.jwt; this module's __all__ lists error classes only).
TOKEN_REFUSALS: dict[str, str] = {
    "malformed": "The bearer token is not a well-formed JWT.",
    "unknown-issuer": "Tokens of this issuer are not accepted here.",
    "bad-signature": "The token's signature does not verify.",
    "bad-algorithm": "The token's signing algorithm is not accepted.",
    "unknown-key": "The token is signed with a key its issuer does not publish.",
    "expired": "The token has expired.",
    "not-yet-valid": "The token is not valid yet.",
    "bad-audience": "The token was issued for another audience.",
    "bad-type": "The token is not an access token (its typ header).",
    "missing-subject": "The token names no subject (sub).",
    "bad-claims": "The token's claims do not map to a principal.",
    "rule-failed": "The token does not satisfy the gateway's rules.",
    "keys-unavailable": "The issuer's signing keys cannot be fetched: its tokens are refused until they can.",
    "too-large": "The token is too large.",
    "insufficient-scope": "The token lacks a required scope.",
}


class TokenRefused(CredentialError):
    """A bearer token that is not accepted, with a ``reason`` of ``TOKEN_REFUSALS`` (never the token's content)."""

    code = "invalid-token"
    # ``status`` is 401, or 403 for ``insufficient-scope`` (the token is good but does not allow this), whose
    # ``scope`` names the missing scopes, space-separated.

    def __init__(self, reason: str, message: str | None = None, scope: str = "") -> None:
        super().__init__(message or TOKEN_REFUSALS[reason])
        self.reason = reason
        self.scope = scope
        if reason == "insufficient-scope":
            self.code, self.status = "insufficient-scope", 403


class UpstreamNotReached(UpstreamError):
    """The request provably never left the gateway (connection refused, no route, DNS); approvals stay usable."""

    code = "upstream-not-reached"


class UpstreamDown(UpstreamNotReached):
    """An upstream that cannot serve now (not started, exited, refused); see ``reason``."""

    code = "upstream-down"

    # ``reason`` is short and safe to show anyone (no URL, path or secret: /readyz prints it);
    # the message has the details, for operators.

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class UpstreamCredentialsError(UpstreamNotReached):
    """The gateway could not get the credential the upstream needs, so nothing was sent (fail closed)."""

    # The message is written for the agent and the audit log alike: it names the upstream and why (the
    # identity provider's error code, a timeout, a caller without a token), never a token or a secret.

    code = "upstream-credentials"


class ModelUpstreamError(GatewayError):
    """The model upstream could not be reached or answered with an error (``status`` is relayed)."""

    code = "model-upstream"

    def __init__(self, message: str, status: int = 502, body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
