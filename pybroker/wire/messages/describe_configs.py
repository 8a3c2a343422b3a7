"""DescribeConfigs (key 32): request and response layouts, versions 0-4.

Kafka's spec: validVersions 1-4.

Kafka 4.0 dropped versions 0 from DescribeConfigsRequest.json/DescribeConfigsResponse.json (the
spec kafka-python ships starts at 1); we still declare them because older clients send them.
They are taken from Kafka 3.x's specs, whose field version ranges the 4.x spec kept unchanged
(v0 has no include_synonyms in the request and carries is_default instead of config_source and
synonyms in the response), so every field below has exactly Kafka 3.x's versions;
tests/test_schema_crosscheck.py also checks these old versions against kafka-python's legacy
kafka.protocol.old classes.
"""

from pybroker.wire.schema import F, api, declare

# DescribeConfigsResponse.ConfigSource, named as kafka-configs --describe prints them
CONFIG_SOURCES = (
    "UNKNOWN",
    "DYNAMIC_TOPIC_CONFIG",
    "DYNAMIC_BROKER_CONFIG",
    "DYNAMIC_DEFAULT_BROKER_CONFIG",
    "STATIC_BROKER_CONFIG",
    "DEFAULT_CONFIG",
    "DYNAMIC_BROKER_LOGGER_CONFIG",
    "CLIENT_METRICS_CONFIG",
    "GROUP_CONFIG",
)


def config_source_name(source: int) -> str:
    """A config_source value as Kafka names it (the number itself when unknown)."""
    return CONFIG_SOURCES[source] if 0 <= source < len(CONFIG_SOURCES) else str(source)


DESCRIBE_CONFIGS = declare(
    api(
        32,
        "DescribeConfigs",
        versions="0-4",
        flexible="4+",
        request=[
            F(
                "resources",
                "[]DescribeConfigsResource",
                "0+",
                F("resource_type", "int8", "0+"),
                F("resource_name", "string", "0+"),
                F("configuration_keys", "[]string", "0+", nullable="0+"),
            ),
            F("include_synonyms", "bool", "1+", default=False),
            F("include_documentation", "bool", "3+", default=False),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F(
                "results",
                "[]DescribeConfigsResult",
                "0+",
                F("error_code", "int16", "0+"),
                F("error_message", "string", "0+", nullable="0+"),
                F("resource_type", "int8", "0+"),
                F("resource_name", "string", "0+"),
                F(
                    "configs",
                    "[]DescribeConfigsResourceResult",
                    "0+",
                    F("name", "string", "0+"),
                    F("value", "string", "0+", nullable="0+"),
                    F("read_only", "bool", "0+"),
                    F("config_source", "int8", "1+", default=-1),
                    F("is_default", "bool", "0"),
                    F("is_sensitive", "bool", "0+"),
                    F(
                        "synonyms",
                        "[]DescribeConfigsSynonym",
                        "1+",
                        F("name", "string", "1+"),
                        F("value", "string", "1+", nullable="0+"),
                        F("source", "int8", "1+"),
                    ),
                    F("config_type", "int8", "3+", default=0),
                    F("documentation", "string", "3+", nullable="0+"),
                ),
            ),
        ],
    )
)
