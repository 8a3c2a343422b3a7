"""BROKER_LOGGER resources (KIP-412): the broker's Python loggers under Kafka's level names,
as Kafka's Log4jController / RuntimeLoggerManager answer for log4j loggers.

- Loggers: ``root`` and every existing ``pybroker*`` logger; each reports its effective level
  (its own, else its nearest ancestor's, else root's) as TRACE, DEBUG, INFO, WARN, ERROR,
  FATAL or OFF (a level above CRITICAL).
- SET a level (one of Kafka's LogLevelConfig.VALID_LOG_LEVELS: TRACE, DEBUG, INFO, WARN,
  ERROR, FATAL; OFF is not among them), DELETE a logger's own level (it inherits again; root's
  cannot be removed); APPEND / SUBTRACT refused.  Errors with Kafka's messages:
  INVALID_CONFIG for an unknown logger or level, INVALID_REQUEST for the rest.
- Not persisted: a restart brings the levels pybroker starts with (as Kafka's).
"""

from __future__ import annotations

import logging

from pybroker.errors import ErrorCode, KafkaError

ROOT = "root"
TRACE = 5
OFF = logging.CRITICAL + 10
# Kafka's name -> Python level, and the reverse for reporting
KAFKA_LEVELS = {
    "TRACE": TRACE,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}
VALID_LOG_LEVELS_STRING = ", ".join(sorted(KAFKA_LEVELS))
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def kafka_level(level: int) -> str:
    """The Kafka name of a Python level (a level between two names reports the lower one)."""
    if level > logging.CRITICAL:
        return "OFF"
    name = "TRACE"
    for kafka_name, value in sorted(KAFKA_LEVELS.items(), key=lambda kv: kv[1]):
        if level >= value:
            name = kafka_name
    return name


def _existing(name: str) -> logging.Logger | None:
    if name == ROOT:
        return logging.getLogger()
    found = logging.root.manager.loggerDict.get(name)
    return found if isinstance(found, logging.Logger) else None


def loggers() -> dict[str, str]:
    """Log4jController.loggers: root and every pybroker logger with its effective level."""
    out = {ROOT: kafka_level(logging.getLogger().level)}
    for name in sorted(logging.root.manager.loggerDict):
        if name == "pybroker" or name.startswith("pybroker."):
            lg = _existing(name)
            if lg is not None:
                out[name] = kafka_level(lg.getEffectiveLevel())
    return out


def _known(name: str) -> bool:
    return name in loggers()


def validate(ops: list[dict]) -> None:
    """RuntimeLoggerManager.validateLogLevelConfigs."""
    for op in ops:
        name, kind = op["name"], op["config_operation"]
        if kind in (SET, DELETE) and not _known(name):
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
        if kind == SET:
            if op["value"] not in KAFKA_LEVELS:
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG,
                    f"Cannot set the log level of {name} to {op['value']} as it is not a "
                    f"supported log level. Valid log levels are {VALID_LOG_LEVELS_STRING}",
                )
        elif kind == DELETE:
            if name == ROOT:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    f"Removing the log level of the {ROOT} logger is not allowed",
                )
        elif kind == APPEND:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "APPEND operation is not allowed for the BROKER_LOGGER resource",
            )
        elif kind == SUBTRACT:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "SUBTRACT operation is not allowed for the BROKER_LOGGER resource",
            )
        else:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"Unknown operation type {kind} is not allowed for the BROKER_LOGGER resource",
            )


def apply(ops: list[dict], log: logging.Logger) -> None:
    """RuntimeLoggerManager.alterLogLevelConfigs (after ``validate``)."""
    for op in ops:
        name = op["name"]
        lg = _existing(name)
        if lg is None:
            continue
        if op["config_operation"] == SET:
            lg.setLevel(KAFKA_LEVELS[op["value"]])
            log.warning("Updated the log level of %s to %s", name, op["value"])
        else:
            lg.setLevel(logging.NOTSET)
            log.warning("Unset the log level of %s", name)


logging.addLevelName(TRACE, "TRACE")
