"""`kraftcore acls` and `kraftcore scram`: ACLs like Kafka's `kafka-acls`, and SCRAM
credentials like `kafka-configs --entity-type users` (docs/admin.md). This module parses
the arguments and prints what `kraftcore.admin.acls.SecurityAdmin` returns.

    kraftcore acls add    BOOTSTRAP (--allow-principal P | --deny-principal P)...
                          [--allow-host H]... [--deny-host H]... [--operation OP]...
                          RESOURCE... [--resource-pattern-type literal|prefixed]
    kraftcore acls list   BOOTSTRAP [RESOURCE...] [--principal P]
                          [--resource-pattern-type literal|prefixed|match|any] [--json]
    kraftcore acls remove BOOTSTRAP RESOURCE... [--allow-principal P | --deny-principal P]...
                          [--allow-host H]... [--deny-host H]... [--operation OP]...
                          [--resource-pattern-type literal|prefixed|match|any] [--force]
    kraftcore scram describe BOOTSTRAP [--user U]... [--json]
    kraftcore scram alter    BOOTSTRAP --user U
                             (--add-config 'SCRAM-SHA-512=[iterations=8192,password=...]'
                              | --delete-config SCRAM-SHA-512)

RESOURCE is `--topic T`, `--group G`, `--transactional-id T` (each repeatable) or
`--cluster`. BOOTSTRAP is `--bootstrap-server HOST:PORT[,...]` (brokers) or
`--bootstrap-controller HOST:PORT`. As in kafka-acls, an ACL's host is `*` unless hosts
are given, `add` without `--operation` grants ALL, and `remove` without principals
removes every ACL of the resources. `remove` asks nothing (`--force` is accepted).

Exit status: 0 done; 1 refused or nothing answered (one line on stderr); 2 a usage error.
"""

import argparse
import asyncio
import json
import sys

from kraftcore.cli.admin import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError,
                                 check_timeout, cluster_arguments, command_options,
                                 parse_bootstrap, run_reporting)
from kraftcore.errors import KraftcoreError
from kraftcore.security.acls import (CLUSTER_NAME, AclBinding, AclBindingFilter,
                                     AclOperation, AclPermissionType, PatternType,
                                     ResourceType, parse_enum)

__all__ = ["COMMANDS", "add_arguments", "run", "parse_scram_config", "format_acls"]

COMMANDS = ("acls", "scram")
ITERATIONS_DEFAULT = 4096


def add_arguments(sub):
    common = cluster_arguments("brokers' listeners", "a controller's listener")

    resources = argparse.ArgumentParser(add_help=False)
    resources.add_argument("--topic", action="append", default=[], metavar="TOPIC")
    resources.add_argument("--group", action="append", default=[], metavar="GROUP")
    resources.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    resources.add_argument("--cluster", action="store_true", help="the cluster resource")
    resources.add_argument("--resource-pattern-type", default="literal",
                           metavar="literal|prefixed|match|any",
                           help="how the names are matched (default literal)")

    entries = argparse.ArgumentParser(add_help=False)
    for flag in ("--allow-principal", "--deny-principal", "--allow-host", "--deny-host",
                 "--operation"):
        entries.add_argument(flag, action="append", default=[])

    acls = sub.add_parser("acls", help="add, list and remove ACLs (like kafka-acls)",
                          description="ACLs, like kafka-acls.")
    acls_sub = acls.add_subparsers(dest="action", metavar="ACTION", required=True)
    acls_sub.add_parser("add", parents=[common, resources, entries],
                        help="add ACLs (every principal x host x operation x resource)")
    alist = acls_sub.add_parser("list", parents=[common, resources],
                                help="list ACLs (all, or those of the resources given)")
    alist.add_argument("--principal", action="append", default=[])
    alist.add_argument("--json", action="store_true", help="one JSON object")
    remove = acls_sub.add_parser("remove", parents=[common, resources, entries],
                                 help="remove ACLs of the resources given")
    remove.add_argument("--force", action="store_true", help="accepted; nothing is asked")

    scram = sub.add_parser("scram", help="describe and alter SCRAM credentials",
                           description="SCRAM credentials, like kafka-configs "
                           "--entity-type users.")
    scram_sub = scram.add_subparsers(dest="action", metavar="ACTION", required=True)
    describe = scram_sub.add_parser("describe", parents=[common],
                                    help="users' mechanisms and iterations")
    describe.add_argument("--user", action="append", default=[])
    describe.add_argument("--json", action="store_true", help="one JSON object")
    alter = scram_sub.add_parser("alter", parents=[common], help="set or delete credentials")
    alter.add_argument("--user", required=True)
    what = alter.add_mutually_exclusive_group(required=True)
    what.add_argument("--add-config", metavar="'MECHANISM=[iterations=N,password=P],...'")
    what.add_argument("--delete-config", metavar="MECHANISM[,MECHANISM]")
    return sub


# ------------------------------------------------------------------------------ parsing

def _enum(cls, text, flag):
    try:
        return parse_enum(cls, text)
    except ValueError as exc:
        raise CommandError(f"bad {flag}: {exc}", EXIT_USAGE) from None


def _resources(args):
    """[(ResourceType, name)] of the resource flags."""
    out = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _entries(args):
    """[(principal, host, permission)] of the principal and host flags."""
    out = []
    for principals, hosts, perm in ((args.allow_principal, args.allow_host,
                                     AclPermissionType.ALLOW),
                                    (args.deny_principal, args.deny_host,
                                     AclPermissionType.DENY)):
        if hosts and not principals:
            raise CommandError("a host needs the principal it applies to (--allow-host with "
                               "--allow-principal, --deny-host with --deny-principal)",
                               EXIT_USAGE)
        for p in principals:
            if ":" not in p or p.startswith(":") or p.endswith(":"):
                raise CommandError(f"bad principal {p!r}: expected Type:name, e.g. "
                                   "User:alice", EXIT_USAGE)
            out += [(p, h, perm) for h in (hosts or ["*"])]
    return out


def _plan(args):
    """The bindings (add) or filters (list, remove) the arguments name."""
    ptype = _enum(PatternType, args.resource_pattern_type, "--resource-pattern-type")
    resources = _resources(args)
    if args.action == "list":
        principals = args.principal or [None]
        if not resources:
            return [AclBindingFilter(principal=p, pattern_type=PatternType.ANY)
                    for p in principals]
        return [AclBindingFilter(rtype, name, ptype, principal=p)
                for rtype, name in resources for p in principals]
    if not resources:
        raise CommandError("give at least one resource: --topic, --group, "
                           "--transactional-id or --cluster", EXIT_USAGE)
    entries = _entries(args)
    ops = [_enum(AclOperation, op, "--operation") for op in args.operation]
    if args.action == "add":
        if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise CommandError("add takes --resource-pattern-type literal or prefixed",
                               EXIT_USAGE)
        if not entries:
            raise CommandError("add needs --allow-principal or --deny-principal", EXIT_USAGE)
        return [AclBinding(rtype, name, ptype, p, h, op, perm)
                for rtype, name in resources for p, h, perm in entries
                for op in (ops or [AclOperation.ALL])]
    if not entries:
        return [AclBindingFilter(rtype, name, ptype, operation=op)
                for rtype, name in resources for op in (ops or [AclOperation.ANY])]
    return [AclBindingFilter(rtype, name, ptype, p, h, op, perm)
            for rtype, name in resources for p, h, perm in entries
            for op in (ops or [AclOperation.ANY])]


def parse_scram_config(text):
    """'SCRAM-SHA-256=[iterations=8192,password=x],SCRAM-SHA-512=[password=y]' ->
    [(mechanism code, password, iterations)]; CommandError (usage) otherwise."""
    from kraftcore.security.scram_keys import mechanism_of

    out = []
    rest = text.strip()
    while rest:
        name, eq, rest = rest.partition("=")
        if not eq or not rest.startswith("["):
            raise CommandError(f"bad --add-config {text!r}: expected "
                               "MECHANISM=[iterations=N,password=P]", EXIT_USAGE)
        body, close, rest = rest[1:].partition("]")
        if not close:
            raise CommandError(f"bad --add-config {text!r}: no closing ']'", EXIT_USAGE)
        rest = rest.lstrip(",").strip()
        try:
            mechanism = mechanism_of(name.strip())
        except ValueError as exc:
            raise CommandError(f"bad --add-config: {exc}", EXIT_USAGE) from None
        settings = {}
        for item in body.split(","):
            key, eq, value = item.partition("=")
            if not eq or key.strip() not in ("iterations", "password"):
                raise CommandError(f"bad --add-config item {item!r}: expected iterations=N "
                                   "or password=P", EXIT_USAGE)
            settings[key.strip()] = value
        if "password" not in settings:
            raise CommandError(f"--add-config {name.strip()} needs password=...", EXIT_USAGE)
        iterations = settings.get("iterations", str(ITERATIONS_DEFAULT)).strip()
        if not iterations.isdigit():
            raise CommandError(f"bad iterations {iterations!r}", EXIT_USAGE)
        out.append((mechanism, settings["password"], int(iterations)))
    return out


# ------------------------------------------------------------------------------ output

def _pattern_text(b):
    return (f"ResourcePattern(resourceType={b.resource_type.name}, name={b.name}, "
            f"patternType={b.pattern_type.name})")


def format_acls(bindings, heading="Current ACLs for resource"):
    """kafka-acls' listing: a heading per resource pattern, then its entries."""
    by_pattern = {}
    for b in bindings:
        by_pattern.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    lines = []
    for _, group in sorted(by_pattern.items()):
        lines.append(f"{heading} `{_pattern_text(group[0])}`: ")
        for b in sorted(group):
            lines.append(f" \t(principal={b.principal}, host={b.host}, "
                         f"operation={b.operation.name}, permissionType={b.permission.name}) ")
        lines.append("")
    return lines


# ------------------------------------------------------------------------------ running

def run(args):
    """Run the acls or scram command of parsed `args`; returns the exit status."""
    label = f"kraftcore {args.command} {args.action}"

    def body():
        check_timeout(args)
        plan = _plan(args) if args.command == "acls" else None
        if args.command == "scram" and args.action == "alter":
            if not args.user:
                raise CommandError("--user is empty", EXIT_USAGE)
            args.upserts = parse_scram_config(args.add_config) if args.add_config else []
        bootstrap, controller = parse_bootstrap(args)
        return asyncio.run(_main(args, plan, bootstrap, controller))

    return run_reporting(label, body)


async def _main(args, plan, bootstrap, controller):
    from kraftcore.admin.acls import SecurityAdmin

    admin = SecurityAdmin(bootstrap, controller=controller, timeout_ms=args.timeout_ms,
                          connection_options=command_options(args))
    try:
        work = _COMMANDS[(args.command, args.action)](admin, args, plan)
        lines, status = await asyncio.wait_for(work, args.timeout_ms / 1000)
    except KraftcoreError as exc:
        raise CommandError(exc) from None
    except asyncio.TimeoutError:
        raise CommandError(f"no answer within {args.timeout_ms} ms") from None
    finally:
        await admin.close()
    for line in lines:
        print(line)
    sys.stdout.flush()
    return status


async def _add(admin, args, bindings):
    results = await admin.create_acls(bindings)
    failed = [(b, error) for b, error in results if error]
    for b, error in failed:
        print(f"kraftcore acls add: cannot add {b}: {error}", file=sys.stderr)
    added = [b for b, error in results if not error]
    return format_acls(added, "Adding ACLs for resource"), EXIT_FAILED if failed else EXIT_OK


async def _list(admin, args, filters):
    from kraftcore.admin.acls import binding_doc

    found = {}
    for f in filters:
        for b in await admin.list_acls(f):
            found[b] = None
    if args.json:
        return [json.dumps({"acls": [binding_doc(b) for b in sorted(found)]})], EXIT_OK
    return format_acls(found), EXIT_OK


async def _remove(admin, args, filters):
    deleted = await admin.delete_acls(filters)
    return format_acls(deleted, "Removed ACLs for resource"), EXIT_OK


async def _scram_describe(admin, args, _):
    users = await admin.describe_scram(args.user or None)
    if args.json:
        return [json.dumps({"users": {u: [{"mechanism": mech, "iterations": it}
                                          for mech, it in creds]
                                      for u, creds in users.items()}})], EXIT_OK
    return [f"SCRAM credential configs for user-principal '{u}' are "
            + ", ".join(f"{mech}=iterations={it}" for mech, it in creds)
            for u, creds in users.items()], EXIT_OK


async def _scram_alter(admin, args, _):
    from kraftcore.security.scram_keys import mechanism_of

    upserts = [(args.user, mech, password, iterations)
               for mech, password, iterations in args.upserts]
    deletes = []
    if args.delete_config:
        try:
            deletes = [(args.user, mechanism_of(x)) for x in args.delete_config.split(",")]
        except ValueError as exc:
            raise CommandError(f"bad --delete-config: {exc}", EXIT_USAGE) from None
    # One request per mechanism: the controller refuses a user named twice in a request.
    for upsert in upserts:
        _check_altered(args.user, await admin.alter_scram([upsert], []))
    for delete in deletes:
        _check_altered(args.user, await admin.alter_scram([], [delete]))
    return [f"Completed updating config for user {args.user}."], EXIT_OK


def _check_altered(user, results):
    error = results.get(user)
    if error:
        raise CommandError(f"cannot alter the credentials of {user!r}: {error}")


_COMMANDS = {("acls", "add"): _add, ("acls", "list"): _list, ("acls", "remove"): _remove,
             ("scram", "describe"): _scram_describe, ("scram", "alter"): _scram_alter}
