"""DescribeAcls (key 29): request and response layouts, versions 0-3.

Kafka's spec: validVersions 1-3.

Kafka 4.0 dropped version 0 from DescribeAclsRequest.json/DescribeAclsResponse.json (the spec
kafka-python ships starts at 1); we still declare it because the 3.9 Java client speaks it.
It is taken from Kafka 3.x's specs, whose field version ranges the 4.x spec kept unchanged (v0
has no pattern type), so every field below has exactly Kafka 3.x's versions;
tests/test_schema_crosscheck.py also checks v0 against kafka-python's legacy
kafka.protocol.old classes.
"""

from pybroker.wire.schema import F, api, declare

DESCRIBE_ACLS = declare(
    api(
        29,
        "DescribeAcls",
        versions="0-3",
        flexible="2+",
        request=[
            F("resource_type_filter", "int8", "0+"),
            F("resource_name_filter", "string", "0+", nullable="0+"),
            F("pattern_type_filter", "int8", "1+", default=3),
            F("principal_filter", "string", "0+", nullable="0+"),
            F("host_filter", "string", "0+", nullable="0+"),
            F("operation", "int8", "0+"),
            F("permission_type", "int8", "0+"),
        ],
        response=[
            F("throttle_time_ms", "int32", "0+"),
            F("error_code", "int16", "0+"),
            F("error_message", "string", "0+", nullable="0+"),
            F(
                "resources",
                "[]DescribeAclsResource",
                "0+",
                F("resource_type", "int8", "0+"),
                F("resource_name", "string", "0+"),
                F("pattern_type", "int8", "1+", default=3),
                F(
                    "acls",
                    "[]AclDescription",
                    "0+",
                    F("principal", "string", "0+"),
                    F("host", "string", "0+"),
                    F("operation", "int8", "0+"),
                    F("permission_type", "int8", "0+"),
                ),
            ),
        ],
    )
)
