"""`kraftcore acls` and `kraftcore scram` against a `kraftcore cluster up` of one controller
and one broker on 127.0.0.1: ACLs added through the broker (which forwards them to the
controller) are listed by both nodes and removed again; credentials are set, described and
deleted; and kafka-python's admin client creates, describes and deletes ACLs at the broker.

Every wait is bounded and none is a timing goal.
"""

import json

import pytest

from tests.runtime.processes import LocalCluster, broker_address, kraftcore, wait_for


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # ACLs need an authorizer; on these PLAINTEXT listeners every client, the nodes
    # included, is User:ANONYMOUS, made a super user so that nothing is refused
    c = LocalCluster(tmp_path_factory.mktemp("acls-cli"), (
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:ANONYMOUS"), brokers=1, controllers=1)
    try:
        wait_for("an unfenced broker", lambda: list(c.brokers().values()) == ["unfenced"])
        yield c
    finally:
        c.down()


def run(command, *argv, check=True):
    return kraftcore(command, *argv, "--timeout-ms", "20000", check=check)


def listed(where, *argv):
    out = run("acls", "list", *where, *argv, "--json").stdout
    return sorted((a["resource_type"], a["name"], a["pattern_type"], a["principal"],
                   a["host"], a["operation"], a["permission"]) for a in json.loads(out)["acls"])


def test_acls_add_list_remove(cluster):
    broker = ["--bootstrap-server", broker_address(cluster)]
    controller = ["--bootstrap-controller", cluster.bootstrap()]
    added = run("acls", "add", *broker, "--allow-principal", "User:alice", "--operation",
                "read", "--operation", "describe", "--topic", "orders", "--group", "g1")
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, " \
           "patternType=LITERAL)`" in added.stdout
    run("acls", "add", *controller, "--deny-principal", "User:bob", "--deny-host",
        "10.0.0.9", "--topic", "pay", "--resource-pattern-type", "prefixed")
    expected = [
        ("GROUP", "g1", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW"),
        ("GROUP", "g1", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
        ("TOPIC", "pay", "PREFIXED", "User:bob", "10.0.0.9", "ALL", "DENY")]
    assert listed(controller) == expected
    wait_for("the broker's image to list the ACLs", lambda: listed(broker) == expected)
    assert listed(controller, "--topic", "payments", "--resource-pattern-type", "match") == \
        [expected[-1]]
    text = run("acls", "list", *controller, "--topic", "orders").stdout
    assert " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW) " in text
    bad = run("acls", "add", *broker, "--allow-principal", "User:x", "--cluster",
              "--resource-pattern-type", "match", check=False)
    assert bad.returncode == 2
    run("acls", "remove", *broker, "--topic", "orders", "--group", "g1", "--force")
    assert listed(controller) == [expected[-1]]
    run("acls", "remove", *controller, "--topic", "pay", "--resource-pattern-type", "prefixed")
    assert listed(controller) == []

    # SCRAM credentials
    run("scram", "alter", *broker, "--user", "alice", "--add-config",
        "SCRAM-SHA-256=[iterations=8192,password=a-secret],SCRAM-SHA-512=[password=b]")
    users = json.loads(run("scram", "describe", *controller, "--json").stdout)["users"]
    assert users == {"alice": [{"mechanism": "SCRAM-SHA-256", "iterations": 8192},
                               {"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}
    run("scram", "alter", *controller, "--user", "alice", "--delete-config", "SCRAM-SHA-256")
    missing = run("scram", "alter", *controller, "--user", "alice", "--delete-config",
                  "SCRAM-SHA-256", check=False)
    assert missing.returncode == 1 and "RESOURCE_NOT_FOUND" in missing.stderr


def test_kafka_python_admin_client_manages_acls(cluster):
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType,
                             ACLResourcePatternType, KafkaAdminClient, ResourcePattern,
                             ResourcePatternFilter, ResourceType)

    admin = KafkaAdminClient(bootstrap_servers=broker_address(cluster),
                             request_timeout_ms=20000)
    try:
        acl = ACL(principal="User:carol", host="*", operation=ACLOperation.WRITE,
                  permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(ResourceType.TOPIC, "kp",
                                                   ACLResourcePatternType.LITERAL))
        result = admin.create_acls([acl])
        assert len(result["succeeded"]) == 1 and not result["failed"]
        flt = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                        permission_type=ACLPermissionType.ANY,
                        resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, "kp",
                                                               ACLResourcePatternType.ANY))

        def described():
            acls, error = admin.describe_acls(flt)
            return [(a.principal, a.operation) for a in acls]

        assert wait_for("the broker to describe the ACL", described) == [
            ("User:carol", ACLOperation.WRITE)]
        deleted = admin.delete_acls([flt])
        ((_, matches, error),) = deleted
        assert [a.principal for a in matches] == ["User:carol"]
        assert error.errno == 0
        wait_for("the ACL to be gone", lambda: admin.describe_acls(flt)[0] == [])
    finally:
        admin.close()
