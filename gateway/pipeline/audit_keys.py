"""The Ed25519 keys of the decision log's checkpoints: the gateway signs with a private key, ``gateway
audit verify --key`` checks with the public one.

Keys are PEM: the private key PKCS#8 and unencrypted (``openssl genpkey -algorithm ed25519``), the
public key SubjectPublicKeyInfo (``openssl pkey -in KEY -pubout``). A key is named in each checkpoint
by its id, the first 16 hex digits of the SHA-256 of its 32 raw public bytes, so a verifier given
another key says so instead of reporting forged signatures.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = ["CheckpointSigner", "CheckpointVerifier", "load_signer", "load_verifier"]


class CheckpointSigner:
    """Signs checkpoint messages with an Ed25519 private key."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self.key = key
        self.key_id = _key_id(key.public_key())

    def sign(self, message: bytes) -> str:
        """The signature of ``message``, base64."""
        return base64.b64encode(self.key.sign(message)).decode("ascii")


class CheckpointVerifier:
    """Checks checkpoint signatures with an Ed25519 public key."""

    def __init__(self, key: Ed25519PublicKey) -> None:
        self.key = key
        self.key_id = _key_id(key)

    def verify(self, message: bytes, signature: object) -> bool:
        """Whether ``signature`` (base64 text) is this key's signature of ``message``."""
        if not isinstance(signature, str):
            return False
        try:
            self.key.verify(base64.b64decode(signature, validate=True), message)
        except (InvalidSignature, binascii.Error, ValueError):
            return False
        return True


def load_signer(pem: bytes) -> CheckpointSigner:
    """The signer of an unencrypted Ed25519 private key in PEM; ValueError saying what is wrong."""
    try:
        key = serialization.load_pem_private_key(_pem(pem), password=None)
    except TypeError:  # encrypted: the gateway starts unattended, so there is no one to ask for the password
        raise ValueError("the key is encrypted: give an unencrypted PKCS#8 PEM key (keep the file 0600)") from None
    except (ValueError, UnsupportedAlgorithm):
        raise ValueError("not a PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"the key is {_algorithm(key)}, not Ed25519")
    return CheckpointSigner(key)


def load_verifier(pem: bytes) -> CheckpointVerifier:
    """The verifier of an Ed25519 public key in PEM; ValueError saying what is wrong."""
    try:
        key = serialization.load_pem_public_key(_pem(pem))
    except (ValueError, UnsupportedAlgorithm):
        if b"PRIVATE KEY" in pem:
            raise ValueError("a private key: give the public key (openssl pkey -in KEY -pubout)") from None
        raise ValueError("not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"the key is {_algorithm(key)}, not Ed25519")
    return CheckpointVerifier(key)


def _algorithm(key: object) -> str:
    """``RSA`` for an RSAPrivateKey, ``EllipticCurve`` for an EllipticCurvePublicKey, …"""
    return type(key).__name__.removesuffix("PrivateKey").removesuffix("PublicKey")


def _pem(data: bytes) -> bytes:
    """PEM with its final newline (a secret read from a file or variable comes stripped)."""
    return data.strip() + b"\n"


def _key_id(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]
