"""The decision log from `audit:`: the file and stdout, redaction, bounds, rotation, the chain and its signing key."""

from __future__ import annotations

from gateway.config.load import LoadedConfig, resolve_secret
from gateway.core.diagnostics import Diagnostic
from gateway.core.errors import ConfigError
from gateway.core.limits import AUDIT_CHECKPOINT_EVERY
from gateway.pipeline.audit import AuditLog, ChainSettings, Redactor, Rotation
from gateway.pipeline.audit_keys import CheckpointSigner, load_signer

__all__ = ["build_audit"]


def build_audit(config: LoadedConfig, redactor: Redactor) -> AuditLog:
    """The audit log `audit:` describes; ``ConfigError`` for a signing key that cannot be used, and
    ``AuditStartError`` when the file's chain cannot be taken up (gateway/pipeline/audit_start.py)."""
    spec = config.spec.audit
    rotation = Rotation(spec.rotate.max_bytes, spec.rotate.keep) if spec.rotate is not None else None
    chain = ChainSettings(_signer(config), spec.sign.every if spec.sign is not None else AUDIT_CHECKPOINT_EVERY,
                          spec.on_broken_chain)
    return AuditLog(config.path(spec.file) if spec.file else None, spec.stdout, redactor, fsync=spec.fsync,
                    max_value_bytes=spec.max_value_bytes, max_event_bytes=spec.max_event_bytes, rotation=rotation,
                    chain=chain)


def _signer(config: LoadedConfig) -> CheckpointSigner | None:
    sign = config.spec.audit.sign
    if sign is None:
        return None
    try:
        return load_signer(resolve_secret(sign.key, config.base).encode())
    except ValueError as exc:
        where = config.document.position(("audit", "sign", "key"))
        raise ConfigError([Diagnostic("audit-sign-key", f"audit.sign.key: {exc}", str(config.file), where.line,
                                      where.column, hint="give an Ed25519 private key in PEM: openssl genpkey"
                                      " -algorithm ed25519 -out audit-signing.pem")]) from None
