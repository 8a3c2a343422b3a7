"""Broker configuration under Kafka's own names (server.properties + --override key=value).

The config model: every broker key is declared once, as a field of :class:`Config` built by
:func:`define` (Kafka's name, ConfigDef type, default, validator; Kafka's documentation and
dynamic update mode come from Kafka itself, pybroker/kafka_broker_configs.py, and
tests/test_config_model.py holds the declarations to Kafka's).  Everything else is derived
from these declarations: :data:`KEYS` (the ConfigDef), :func:`build_config`, DescribeConfigs
(:func:`describe_settings`), dynamic configs (pybroker/dynamic_config.py) and the broker
defaults of topic configs (:meth:`Config.topic_defaults`, pybroker/topic_config.py).

Values parse and validate as Kafka's (pybroker/configdef.py); a bad one fails start-up with a
message naming the key, as do cross-key checks (:func:`validate`) and the listeners' security
(pybroker/security/listeners.py).  Unknown keys are warnings, as Kafka logs them unused, with
the nearest known key suggested; Kafka keys pybroker does not use are said to have no effect.

The package: values.py (listeners, converters, rendering) < keys.py (the declarations, the
Config object) < loading.py (properties parsing, build_config, validate); this module names
what the rest of the broker imports.
"""

from pybroker.config.keys import BROKER_CONFIG, FIELDS, KEYS, BrokerConfigKey, Config, define
from pybroker.config.loading import (
    build_config,
    describe_settings,
    parse_properties,
    unknown_key_warning,
    validate,
    with_defaults_for_cli,
)
from pybroker.config.values import (
    AUTHORIZERS,
    DEFAULT_PROTOCOL_MAP,
    SECURITY_PROTOCOLS,
    ConfigError,
    Endpoint,
    HttpEndpoint,
    render,
)
from pybroker.configdef import LONG_MAX

__all__ = [
    "AUTHORIZERS",
    "BROKER_CONFIG",
    "DEFAULT_PROTOCOL_MAP",
    "FIELDS",
    "KEYS",
    "LONG_MAX",
    "SECURITY_PROTOCOLS",
    "BrokerConfigKey",
    "Config",
    "ConfigError",
    "Endpoint",
    "HttpEndpoint",
    "build_config",
    "define",
    "describe_settings",
    "parse_properties",
    "render",
    "unknown_key_warning",
    "validate",
    "with_defaults_for_cli",
]
