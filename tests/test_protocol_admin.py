"""The admin APIs against a real broker over TCP (Kafka as the spec): DescribeAcls,
CreateAcls, DeleteAcls, DeleteRecords, OffsetDelete, DescribeLogDirs, IncrementalAlterConfigs,
AlterConfigs, ElectLeaders, ListPartitionReassignments, DescribeProducers, ListTransactions."""

from __future__ import annotations

import pytest
from broker_fixture import BrokerFactory

SECURITY_DISABLED = 54
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31


@pytest.fixture
def start_broker(tmp_path):
    with BrokerFactory(tmp_path) as factory:
        yield factory


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for the tests that need no special settings (each uses its own topics)."""
    with BrokerFactory(tmp_path_factory.mktemp("shared")) as factory:
        yield factory(**{"group.initial.rebalance.delay.ms": 0})


@pytest.fixture
def broker(shared_broker):
    return shared_broker


@pytest.fixture
def client(broker):
    with broker.client() as c:
        yield c


# --------------------------------------------------------------------------- ACLs


def acl_filter(version: int) -> dict:
    f = {
        "resource_type_filter": 1,  # ANY
        "resource_name_filter": None,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,  # ANY
        "permission_type": 1,  # ANY
    }
    if version >= 1:
        f["pattern_type_filter"] = 1  # ANY
    return f


@pytest.mark.parametrize("version", range(0, 4))
def test_describe_acls_security_disabled(client, version):
    body = client.request(DESCRIBE_ACLS, version, acl_filter(version))
    assert body["error_code"] == SECURITY_DISABLED
    assert body["error_message"] == "No Authorizer is configured on the broker"
    assert body["resources"] == []


@pytest.mark.parametrize("version", range(0, 4))
def test_create_acls_security_disabled_per_creation(client, version):
    creation = {
        "resource_type": 2,  # TOPIC
        "resource_name": "t",
        "resource_pattern_type": 3,  # LITERAL
        "principal": "User:alice",
        "host": "*",
        "operation": 3,  # READ
        "permission_type": 3,  # ALLOW
    }
    body = client.request(CREATE_ACLS, version, {"creations": [creation, dict(creation)]})
    assert [r["error_code"] for r in body["results"]] == [SECURITY_DISABLED] * 2
    assert all(r["error_message"] == "No Authorizer is configured." for r in body["results"])
    body = client.request(CREATE_ACLS, version, {"creations": []})
    assert body["results"] == []


@pytest.mark.parametrize("version", range(0, 4))
def test_delete_acls_security_disabled_per_filter(client, version):
    body = client.request(
        DELETE_ACLS, version, {"filters": [acl_filter(version), acl_filter(version)]}
    )
    results = body["filter_results"]
    assert [r["error_code"] for r in results] == [SECURITY_DISABLED] * 2
    assert all(r["matching_acls"] == [] for r in results)
