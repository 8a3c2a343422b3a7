"""Kafka's ConfigDef for pybroker: typed config keys, their parsing and validation with Kafka's
messages, and the incremental operations of IncrementalAlterConfigs.

A :class:`ConfigKey` is declared once (name, :class:`Type`, default, validator) and
:class:`ConfigDef` parses a ``{name: str}`` map with it, as Kafka's ``ConfigDef.parse`` does:
values are trimmed and parsed by type (``parseType``), then checked by the key's validator;
failures raise :class:`ConfigException` worded as Kafka's (``Invalid value V for configuration
N: reason``).  ``convert_to_string`` renders a parsed value back as Kafka prints it (the values
DescribeConfigs answers).  The broker keys (pybroker/config/) and the topic keys
(pybroker/topic_config.py) are both declared this way; docs/internals.md has the contract.

Pure: no I/O, no asyncio; importable from every layer (it sits under log and coord).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import IntEnum
from typing import Any

from pybroker.errors import ErrorCode, KafkaError

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1


class Type(IntEnum):
    """ConfigDef.Type, valued as DescribeConfigsResponse.ConfigType (DescribeConfigs v3+)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


# the types by their short names, as the key declarations (topic_config, config/keys) use them
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST = (
    Type.BOOLEAN,
    Type.STRING,
    Type.INT,
    Type.SHORT,
    Type.LONG,
    Type.DOUBLE,
    Type.LIST,
)


class ConfigException(ValueError):
    """Kafka's ConfigException: ``ConfigException(name, value, reason)`` reads "Invalid value
    <value> for configuration <name>: <reason>"; ``ConfigException(message)`` is the message
    alone.  ``name`` and ``reason`` are kept for callers that word the error their own way."""

    def __init__(
        self, name_or_message: str, value: Any = None, reason: str | None = None, *, bare=False
    ) -> None:
        if bare:
            super().__init__(name_or_message)
            self.name: str | None = None
            self.reason = name_or_message
            return
        self.name, self.value, self.reason = name_or_message, value, reason
        text = f"Invalid value {java_str(value)} for configuration {name_or_message}"
        super().__init__(text + (f": {reason}" if reason is not None else ""))


def invalid_configuration(message: str) -> KafkaError:
    """Kafka's InvalidConfigurationException (INVALID_CONFIG, its message as is)."""
    return KafkaError(ErrorCode.INVALID_CONFIG, message)


# --------------------------------------------------------------------------- Java's text

_JAVA_WS = "".join(chr(c) for c in range(33))  # String.trim() drops every char <= ' '
_COMMA_WITH_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]*,[ \t\n\x0b\f\r]*")


def java_trim(s: str) -> str:
    return s.strip(_JAVA_WS)


def java_split(s: str, sep: str = ",") -> list[str]:
    """Java's ``String.split(sep)``: trailing empty strings dropped; no separator: ``[s]``."""
    if sep not in s:
        return [s]
    parts = s.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def java_double(d: float) -> str:
    """Double.toString: decimal between 1e-3 and 1e7, else computerized scientific notation."""
    if d != d:
        return "NaN"
    if d in (float("inf"), float("-inf")):
        return "Infinity" if d > 0 else "-Infinity"
    if d == 0:
        return "-0.0" if str(d).startswith("-") else "0.0"
    sign = "-" if d < 0 else ""
    a = abs(d)
    if 1e-3 <= a < 1e7:
        text = repr(a)
        return sign + (text if "." in text else text + ".0")
    digits, exponent = _shortest_digits(a)
    mantissa = digits[0] + "." + (digits[1:] or "0")
    return f"{sign}{mantissa}E{exponent + len(digits) - 1}"


def _shortest_digits(a: float) -> tuple[str, int]:
    t = Decimal(repr(a)).normalize().as_tuple()
    return "".join(map(str, t.digits)), int(t.exponent)


def java_str(value: Any) -> str:
    """``String.valueOf`` of a parsed config value (the value in ConfigException's text)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(java_str(v) for v in value) + "]"
    return str(value)


# --------------------------------------------------------------------------- parsing

_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
_JAVA_DOUBLE = re.compile(
    r"[+-]?(NaN|Infinity|(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)[fFdD]?)"
)


def _java_integer(text: str, lo: int, hi: int) -> int:
    if not _JAVA_INTEGER.fullmatch(text):
        raise ValueError(text)
    n = int(text)
    if not lo <= n <= hi:
        raise ValueError(text)
    return n


def parse_type(name: str, value: str, type_: Type) -> Any:
    """ConfigDef.parseType for a string value, with Kafka's messages."""
    trimmed = java_trim(value)
    try:
        if type_ == Type.BOOLEAN:
            if trimmed.lower() == "true":
                return True
            if trimmed.lower() == "false":
                return False
            raise ConfigException(name, value, "Expected value to be either true or false")
        if type_ in (Type.STRING, Type.PASSWORD, Type.CLASS):
            return trimmed
        if type_ == Type.INT:
            return _java_integer(trimmed, INT_MIN, INT_MAX)
        if type_ == Type.SHORT:
            return _java_integer(trimmed, SHORT_MIN, SHORT_MAX)
        if type_ == Type.LONG:
            return _java_integer(trimmed, LONG_MIN, LONG_MAX)
        if type_ == Type.DOUBLE:
            if not _JAVA_DOUBLE.fullmatch(trimmed):
                raise ValueError(trimmed)
            return float(trimmed.rstrip("fFdD"))
        if type_ == Type.LIST:
            return [] if not trimmed else _COMMA_WITH_WHITESPACE.split(trimmed)
    except ValueError as e:
        if isinstance(e, ConfigException):
            raise
        raise ConfigException(name, value, f"Not a number of type {type_.name}") from None
    raise AssertionError(type_)


def convert_to_string(value: Any, type_: Type | None) -> str | None:
    """ConfigDef.convertToString: a parsed value as Kafka prints it (None stays None)."""
    if value is None:
        return None
    if type_ == Type.LIST or isinstance(value, (list, tuple)):
        return ",".join(java_str(v) for v in value)
    return java_str(value)


# --------------------------------------------------------------------------- validators


class Validator:
    """ConfigDef.Validator: ``validator(name, parsed_value)`` raises ConfigException;
    ``str(validator)`` is Kafka's description (its documentation's "Valid Values")."""

    def __call__(self, name: str, value: Any) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}>"


def _number(n: float) -> str:
    return java_str(n)


class Range(Validator):
    """ConfigDef.Range: inclusive bounds on a number."""

    def __init__(self, lo: float | None, hi: float | None) -> None:
        self.lo, self.hi = lo, hi

    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            raise ConfigException(name, None, "Value must be non-null")
        if self.lo is not None and value < self.lo:
            raise ConfigException(name, value, f"Value must be at least {_number(self.lo)}")
        if self.hi is not None and value > self.hi:
            raise ConfigException(name, value, f"Value must be no more than {_number(self.hi)}")

    def __str__(self) -> str:
        lo = "..." if self.lo is None else _number(self.lo)
        if self.hi is None:
            return f"[{lo},...]" if self.lo is not None else "[...]"
        return f"[{lo},...,{_number(self.hi)}]" if self.lo is not None else f"[...,{self.hi}]"


def at_least(n: float) -> Range:
    return Range(n, None)


def between(lo: float, hi: float) -> Range:
    return Range(lo, hi)


class ValidString(Validator):
    """ConfigDef.ValidString.in(...): one of the given strings (case-sensitive)."""

    def __init__(self, *strings: str) -> None:
        self.strings = strings

    def __call__(self, name: str, value: Any) -> None:
        if value not in self.strings:
            raise ConfigException(name, value, "String must be one of: " + ", ".join(self.strings))

    def __str__(self) -> str:
        return "[" + ", ".join(self.strings) + "]"


class ValidList(Validator):
    """ConfigDef.ValidList.in(...): every item one of the given strings (an empty list is
    valid)."""

    def __init__(self, *strings: str) -> None:
        self.item = ValidString(*strings)

    def __call__(self, name: str, value: Any) -> None:
        for item in value:
            self.item(name, item)

    def __str__(self) -> str:
        return str(self.item)


class Check(Validator):
    """A validator of pybroker's own: ``check(value)`` returns the reason it is invalid (or
    None); the message is ConfigException's with that reason."""

    def __init__(self, check: Callable[[Any], str | None], description: str) -> None:
        self.check, self.description = check, description

    def __call__(self, name: str, value: Any) -> None:
        reason = self.check(value)
        if reason is not None:
            raise ConfigException(name, value, reason)

    def __str__(self) -> str:
        return self.description


# --------------------------------------------------------------------------- keys


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


@dataclass(frozen=True)
class ConfigKey:
    """One config key: Kafka's ConfigDef.ConfigKey.  ``default`` is the parsed (typed) value,
    None for "no value" (a nullable key), :data:`NO_DEFAULT` for a required one."""

    name: str
    type: Type
    default: Any
    validator: Validator | None = None
    doc: str = ""

    def parse(self, value: str) -> Any:
        """ConfigDef.parseValue for a value that is set: parse, then validate."""
        parsed = parse_type(self.name, value, self.type)
        if self.validator is not None:
            self.validator(self.name, parsed)
        return parsed

    @property
    def default_string(self) -> str | None:
        if self.default is None or self.default is NO_DEFAULT:
            return None
        return convert_to_string(self.default, self.type)


class ConfigDef(Mapping[str, ConfigKey]):
    """An ordered set of keys (definition order, as Kafka's LinkedHashMap)."""

    def __init__(self, keys: Iterable[ConfigKey] = ()) -> None:
        self._keys: dict[str, ConfigKey] = {}
        for key in keys:
            self.define(key)

    def define(self, key: ConfigKey) -> ConfigKey:
        if key.name in self._keys:
            raise ValueError(f"Configuration {key.name} is defined twice.")
        self._keys[key.name] = key
        return key

    def __getitem__(self, name: str) -> ConfigKey:
        return self._keys[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def parse(self, props: Mapping[str, str]) -> dict[str, Any]:
        """ConfigDef.parse: every key's value, parsed and validated, in definition order
        (the first bad value found raises); unset keys take their default."""
        values: dict[str, Any] = {}
        for name, key in self._keys.items():
            if name in props:
                values[name] = key.parse(props[name])
            elif key.default is NO_DEFAULT:
                raise ConfigException(
                    f'Missing required configuration "{name}" which has no default value.',
                    bare=True,
                )
            else:
                values[name] = key.default
                if key.validator is not None and key.default is not None:
                    key.validator(name, key.default)
        return values


# --------------------------------------------------------------------------- IncrementalAlterConfigs

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def incremental(
    ops: Sequence[Mapping[str, Any]],
    props: Mapping[str, str],
    key_of: Callable[[str], tuple[Type, str | None] | None],
) -> dict[str, str]:
    """Kafka 3.9's ConfigAdminManager.prepareIncrementalConfigs: ``props`` (the stored set)
    after ``ops`` (``{"name", "value", "config_operation"}``), in order.  ``key_of(name)`` is
    (type, default as a string) of a key Kafka defines, else None.

    SET stores the value as given, DELETE removes it.  APPEND and SUBTRACT apply to LIST keys
    only (INVALID_CONFIG "Config value append|subtract is not allowed for config key: N"), on
    the stored value, else the key's ConfigDef default (never a broker setting), split with
    Java's ``String.split(",")`` (trailing empty items dropped, inner ones kept): APPEND adds
    the items not already there (an empty old value counts as no items); SUBTRACT removes one
    occurrence per item named (Scala's ``List.diff``) and stores what is left, "" included.
    An APPEND or SUBTRACT of a name Kafka does not define fails as in Kafka (its key lookup
    throws): UNKNOWN_SERVER_ERROR without a message.  Another operation code:
    INVALID_REQUEST "Unknown operations type N"."""
    new = dict(props)
    for op in ops:
        name, value, kind = op["name"], op["value"], op["config_operation"]
        if kind == SET:
            new[name] = value
        elif kind == DELETE:
            new.pop(name, None)
        elif kind in (APPEND, SUBTRACT):
            key = key_of(name)
            if key is None:
                raise KafkaError(ErrorCode.UNKNOWN)
            type_, default = key
            if type_ != Type.LIST:
                verb = "append" if kind == APPEND else "subtract"
                raise invalid_configuration(
                    f"Config value {verb} is not allowed for config key: {name}"
                )
            old_text = new.get(name, default)
            if kind == APPEND:
                old = java_split(old_text) if old_text else []
                new[name] = ",".join(old + [v for v in java_split(value) if v not in old])
            else:
                new[name] = ",".join(_diff(java_split(old_text or ""), java_split(value)))
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {kind}")
    return new


def _diff(items: list[str], remove: list[str]) -> list[str]:
    """Scala's ``List.diff``: the first n occurrences of an item named n times go."""
    left: dict[str, int] = {}
    for r in remove:
        left[r] = left.get(r, 0) + 1
    out = []
    for item in items:
        if left.get(item, 0) > 0:
            left[item] -= 1
        else:
            out.append(item)
    return out


# --------------------------------------------------------------------------- unknown keys


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """The known key nearest to a misspelt ``name`` (None when nothing is close)."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.8)
    return close[0] if close else None
