"""`kraftcore acls` / `kraftcore scram` argument handling: what the flags become, and the
usage errors, without a cluster."""

import pytest

from kraftcore.cli.admin import CommandError
from kraftcore.cli.main import build_parser
from kraftcore.cli.security import _plan, format_acls, parse_scram_config
from kraftcore.security.acls import (AclBinding, AclOperation as Op, AclPermissionType,
                                     PatternType, ResourceType)

BOOT = ["--bootstrap-server", "127.0.0.1:9092"]


def plan(*argv):
    return _plan(build_parser().parse_args(["acls", *argv]))


def test_add_is_every_principal_host_operation_and_resource():
    bindings = plan("add", *BOOT, "--allow-principal", "User:a", "--allow-host", "h1",
                    "--allow-host", "h2", "--operation", "Read", "--topic", "t",
                    "--cluster")
    assert len(bindings) == 4
    assert AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:a",
                      "h2", Op.READ, AclPermissionType.ALLOW) in bindings
    (deny,) = plan("add", *BOOT, "--deny-principal", "User:b", "--group", "g",
                   "--resource-pattern-type", "prefixed")
    assert (deny.host, deny.operation, deny.permission, deny.pattern_type) == (
        "*", Op.ALL, AclPermissionType.DENY, PatternType.PREFIXED)


@pytest.mark.parametrize("argv, message", [
    (["--allow-principal", "User:a"], "at least one resource"),
    (["--topic", "t"], "needs --allow-principal"),
    (["--allow-principal", "alice", "--topic", "t"], "bad principal"),
    (["--allow-host", "h", "--topic", "t"], "a host needs the principal"),
    (["--allow-principal", "User:a", "--topic", "t", "--operation", "reed"], "bad --operation"),
    (["--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "any"],
     "literal or prefixed"),
])
def test_add_usage_errors(argv, message):
    with pytest.raises(CommandError, match=message) as info:
        plan("add", *BOOT, *argv)
    assert info.value.exit_code == 2


def test_list_and_remove_filters():
    (everything,) = plan("list", *BOOT)
    assert everything.pattern_type == PatternType.ANY and everything.name is None
    (match,) = plan("list", *BOOT, "--topic", "t", "--resource-pattern-type", "match",
                    "--principal", "User:a")
    assert (match.name, match.pattern_type, match.principal) == ("t", PatternType.MATCH,
                                                                  "User:a")
    (all_of_t,) = plan("remove", *BOOT, "--topic", "t")
    assert (all_of_t.principal, all_of_t.operation) == (None, Op.ANY)


def test_scram_config():
    assert parse_scram_config("SCRAM-SHA-256=[iterations=8192,password=a=b],"
                              "SCRAM-SHA-512=[password=x]") == [(1, "a=b", 8192),
                                                                  (2, "x", 4096)]
    assert parse_scram_config("SCRAM-SHA-512=[password=x]") == [(2, "x", 4096)]
    for bad in ("PLAIN=[password=x]", "SCRAM-SHA-512=[password=a,b]", "SCRAM-SHA-512=[iterations=9]",
                "SCRAM-SHA-512=password", "SCRAM-SHA-512=[password=x"):
        with pytest.raises(CommandError):
            parse_scram_config(bad)


def test_format_acls_as_kafka_acls_prints_them():
    lines = format_acls([AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:a",
                                    "*", Op.READ, AclPermissionType.ALLOW)])
    assert lines == ["Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, "
                     "patternType=LITERAL)`: ",
                     " \t(principal=User:a, host=*, operation=READ, permissionType=ALLOW) ",
                     ""]
