"""SCRAM client messages as particular clients build them, for tests of what the broker
accepts (pybroker.security.scram.ScramClient is the RFC 5802 client)."""

from __future__ import annotations

import base64
import hashlib
import hmac

from pybroker.security import scram


def librdkafka_2_0_final(
    mech: str, password: str, client_first: bytes, server_first: bytes
) -> bytes:
    """The client-final message librdkafka before 2.6.1 builds: its own nonce, then the
    server's whole nonce (which already starts with it), proof computed over that text."""
    h = scram.MECHANISMS[mech]
    bare = bytes(client_first).decode()[3:]  # after the gs2 header "n,,"
    cnonce = dict(p.split("=", 1) for p in bare.split(","))["r"]
    server_first_text = bytes(server_first).decode()
    attrs = dict(p.split("=", 1) for p in server_first_text.split(","))
    salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
    without_proof = f"c=biws,r={cnonce}{attrs['r']}"
    auth = f"{bare},{server_first_text},{without_proof}".encode()
    salted = scram.salted_password(mech, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", h).digest()
    signature = hmac.new(hashlib.new(h, client_key).digest(), auth, h).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
