"""Kafka's JAAS configuration text, as found in ``listener.name.<l>.<mech>.sasl.jaas.config``::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret";

``parse_jaas`` returns (login module class, control flag, options); values may be quoted
("..." with backslash escapes) or bare words.  Only one login module entry is allowed, as
Kafka requires for ``sasl.jaas.config``.
"""

from __future__ import annotations


class JaasError(ValueError):
    pass


def _tokens(text: str) -> list[str]:
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            out.append(c)
            i += 1
        elif c == '"':
            j, buf = i + 1, []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n:
                    j += 1
                buf.append(text[j])
                j += 1
            if j >= n:
                raise JaasError("unterminated quoted value in JAAS configuration")
            out.append('"' + "".join(buf))
            i = j + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '=;"':
                j += 1
            out.append(text[i:j])
            i = j
    return out


def parse_jaas(text: str) -> tuple[str, str, dict[str, str]]:
    toks = _tokens(text)
    if len(toks) < 3 or toks[-1] != ";":
        raise JaasError("JAAS configuration entry must end with ';'")
    module, flag = toks[0], toks[1]
    if flag.lower() not in ("required", "requisite", "sufficient", "optional"):
        raise JaasError(f"invalid JAAS control flag {flag!r}")
    options: dict[str, str] = {}
    rest = toks[2:-1]
    if ";" in rest:
        raise JaasError("JAAS configuration must contain exactly one login module")
    i = 0
    while i < len(rest):
        if i + 2 >= len(rest) or rest[i + 1] != "=":
            raise JaasError(f"malformed JAAS option near {rest[i]!r}")
        key, value = rest[i], rest[i + 2]
        options[key] = value[1:] if value.startswith('"') else value
        i += 3
    return module, flag, options
