"""`kraftcore groups`: consumer groups on the command line, like Kafka's
`kafka-consumer-groups` (docs/admin.md). This module parses the arguments and prints what
`kraftcore.admin.groups.GroupAdmin` returns, as Kafka's tool prints it (or as JSON).

    kraftcore groups list          BOOTSTRAP [--state STATE[,STATE...]] [--json]
    kraftcore groups describe      BOOTSTRAP GROUP [--offsets | --members [--verbose] | --state]
                                   [--json]
    kraftcore groups reset-offsets BOOTSTRAP GROUP (--topic TOPIC[:P,P...] ... | --all-topics)
                                   (--to-earliest | --to-latest | --to-offset N | --shift-by N)
                                   [--execute | --dry-run] [--json]
    kraftcore groups delete        BOOTSTRAP GROUP

BOOTSTRAP is `--bootstrap-server HOST:PORT[,HOST:PORT...]` (brokers, Kafka's flag) or
`--bootstrap-controller HOST:PORT` (a controller, as the other admin commands take it):
either gives the brokers, which serve the group APIs. Every command takes `--timeout-ms`
(default 30 000), the bound of the whole command; within it a coordinator that is not
available yet, or that moves, is looked for again.

`reset-offsets` is a dry run unless `--execute` is given, and is refused while the group
has members (Kafka's rule: the group must be inactive). Warnings (a reset target moved
into the partition's range, a member's assignment that does not decode) and the dry-run
note go to stderr, so stdout is the table or the JSON alone.

Exit status: 0 done; 1 the operation failed or nothing answered (one line on stderr, no
traceback); 2 a usage error; 130 interrupted.
"""

import asyncio
import json
import sys

from kraftcore.cli.admin import (EXIT_OK, EXIT_USAGE, CommandError, check_timeout,
                                 cluster_arguments, command_options, parse_bootstrap,
                                 run_reporting, table)
from kraftcore.errors import KraftcoreError

__all__ = ["COMMANDS", "add_arguments", "run", "parse_topic", "parse_states",
           "format_list", "format_offsets", "format_members", "format_state", "format_reset"]

COMMANDS = ("groups",)


# ------------------------------------------------------------------------------ arguments

def add_arguments(sub):
    common = cluster_arguments(
        "brokers' listeners (the first that answers gives the others)",
        "a controller's listener; the brokers are found from its metadata")
    common.add_argument("--json", action="store_true", help="one JSON object")

    groups = sub.add_parser(
        "groups", help="list, describe, reset and delete consumer groups",
        description="Consumer groups, like kafka-consumer-groups.")
    groups_sub = groups.add_subparsers(dest="action", metavar="ACTION", required=True)

    glist = groups_sub.add_parser(
        "list", parents=[common], help="every group of every broker",
        description="ListGroups sent to every broker (each lists the groups it "
        "coordinates): one row per group with its protocol type and state.")
    glist.add_argument("--state", action="append", default=[], metavar="STATE[,STATE...]",
                       help="only groups in these states (Kafka's names: Stable, Empty, "
                       "PreparingRebalance, CompletingRebalance, Dead; any case); repeatable")

    describe = groups_sub.add_parser(
        "describe", parents=[common], help="offsets and lag, members, or state of a group",
        description="By default one row per partition the group has committed an offset "
        "for or assigns to a member: the committed offset, the log end offset (the high "
        "watermark), the lag and the member that owns it. --members lists the members, "
        "--state the group's coordinator, assignment strategy, state and member count.")
    describe.add_argument("group", metavar="GROUP")
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="the offsets view (default)")
    view.add_argument("--members", action="store_true", help="one row per member")
    view.add_argument("--state", action="store_true", help="the group's state")
    describe.add_argument("--verbose", action="store_true",
                          help="with --members: each member's instance id and partitions")

    reset = groups_sub.add_parser(
        "reset-offsets", parents=[common], help="move a group's committed offsets",
        description="Plan new committed offsets for an inactive group and, with --execute, "
        "commit them (OffsetCommit with generation -1). Without --execute nothing is "
        "committed. A --to-offset or --shift-by target outside a partition's earliest .. "
        "latest offsets is moved to the nearer end.")
    reset.add_argument("group", metavar="GROUP")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                       help="a topic, or some of its partitions; repeatable")
    scope.add_argument("--all-topics", action="store_true",
                       help="every topic the group has committed offsets for")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="each partition's log start")
    to.add_argument("--to-latest", action="store_true",
                    help="each partition's log end (its high watermark)")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    to.add_argument("--shift-by", type=int, metavar="N",
                    help="the committed offset plus N (N may be negative)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true",
                      help="only print the plan (the default)")

    delete = groups_sub.add_parser(
        "delete", parents=[common], help="delete an inactive group and its offsets",
        description="DeleteGroups: the group and its committed offsets are deleted; a "
        "group with members is refused.")
    delete.add_argument("group", metavar="GROUP")
    return sub


# ------------------------------------------------------------------------------ parsing

def parse_topic(text):
    """TOPIC or TOPIC:P,P... -> (topic, [partition, ...] or None); CommandError (usage)
    otherwise."""
    bad = CommandError(f"bad --topic {text!r}: expected TOPIC or TOPIC:PARTITION[,PARTITION"
                       "...], e.g. orders or orders:0,2", EXIT_USAGE)
    topic, sep, parts = str(text).partition(":")
    if not topic:
        raise bad
    if not sep:
        return topic, None
    partitions = []
    for item in parts.split(","):
        item = item.strip()
        if not item.isdigit() or int(item) > 0x7FFFFFFF:
            raise bad
        partitions.append(int(item))
    return topic, partitions


def _topics(values):
    """{topic: [partition, ...] or None} of repeated --topic values."""
    out = {}
    for text in values:
        topic, parts = parse_topic(text)
        if topic in out and (out[topic] is None or parts is None):
            out[topic] = None
        else:
            out[topic] = sorted(set(out.get(topic, [])) | set(parts)) if parts is not None \
                else None
    return out


def parse_states(values):
    """Repeated, comma-separated --state values -> Kafka's state names; CommandError
    (usage) for a state that is not one."""
    from kraftcore.admin.groups import GROUP_STATES

    by_lower = {s.lower(): s for s in GROUP_STATES}
    out = []
    for value in values:
        for item in value.split(","):
            name = by_lower.get(item.strip().lower())
            if name is None:
                raise CommandError(f"bad --state {item.strip()!r}: expected one of "
                                   f"{', '.join(GROUP_STATES)}", EXIT_USAGE)
            if name not in out:
                out.append(name)
    return out


def _check_usage(args):
    check_timeout(args)
    if getattr(args, "group", None) == "":
        raise CommandError("the group id is empty", EXIT_USAGE)
    if args.action == "list":
        args.states = parse_states(args.state)
    if args.action == "describe" and args.verbose and not args.members:
        raise CommandError("--verbose goes with --members", EXIT_USAGE)
    if args.action == "reset-offsets":
        args.topic_map = None if args.all_topics else _topics(args.topic)
        if args.to_offset is not None and args.to_offset < 0:
            raise CommandError(f"--to-offset must be >= 0, not {args.to_offset}", EXIT_USAGE)


# ------------------------------------------------------------------------------ running

def run(args):
    """Run the groups command of parsed `args`; returns the exit status."""
    label = f"kraftcore groups {args.action}"

    def body():
        _check_usage(args)
        return asyncio.run(_main(args, parse_bootstrap(args)[0], label))

    return run_reporting(label, body)


async def _main(args, bootstrap, label):
    # Imported here: every `kraftcore` command builds this module's parser, and only these
    # commands need the network.
    from kraftcore.admin.client import address_text
    from kraftcore.admin.groups import GroupAdmin

    admin = GroupAdmin(bootstrap, args.timeout_ms, command_options(args))
    warnings = []  # printed after the output, or before the error line

    def warn():
        for warning in warnings:
            print(f"{label}: {warning}", file=sys.stderr)

    try:
        lines = await asyncio.wait_for(_COMMANDS[args.action](admin, args, warnings),
                                       args.timeout_ms / 1000)
    except KraftcoreError as exc:  # AdminError, ConnectError, RequestTimeoutError, ...
        warn()
        raise CommandError(exc) from None
    except asyncio.TimeoutError:
        warn()
        where = ", ".join(address_text(a) for a in bootstrap)
        raise CommandError(f"no answer from {where} (or the brokers it named) within "
                           f"{args.timeout_ms} ms") from None
    finally:
        await admin.close()
    for line in lines:
        print(line)
    sys.stdout.flush()
    warn()
    return EXIT_OK


def _cell(value):
    return "-" if value is None or value == "" else value


# ------------------------------------------------------------------------------ list

def format_list(groups):
    """The table of `groups list`."""
    return table(["GROUP", "PROTOCOL-TYPE", "STATE"],
                 [[g["group"], _cell(g["protocol_type"]), _cell(g["state"])] for g in groups])


async def _list(admin, args, warnings):
    groups = await admin.list_groups(args.states)
    if args.json:
        return [json.dumps({"groups": groups})]
    return format_list(groups)


# ------------------------------------------------------------------------------ describe

def _notices(doc):
    """The lines Kafka's tool prints above a group's table."""
    from kraftcore.admin.groups import REBALANCING_STATES

    if doc["state"] in REBALANCING_STATES:
        return [f"Warning: consumer group '{doc['group']}' is rebalancing."]
    if not doc["members"]:
        return [f"Consumer group '{doc['group']}' has no active members."]
    return []


def format_offsets(doc):
    """The offsets view of `groups describe`: one row per partition, then a row for each
    member that owns no partition (as kafka-consumer-groups --describe prints them)."""
    group = doc["group"]
    rows = [[group, r["topic"], r["partition"], _cell(r["current_offset"]),
             _cell(r["log_end_offset"]), _cell(r["lag"]), _cell(r["member_id"]),
             _cell(r["host"]), _cell(r["client_id"])] for r in doc["offsets"]]
    owning = {r["member_id"] for r in doc["offsets"] if r["member_id"] is not None}
    rows += [[group, "-", "-", "-", "-", "-", m["member_id"], _cell(m["host"]),
              _cell(m["client_id"])] for m in doc["members"] if m["member_id"] not in owning]
    lines = _notices(doc)
    if rows or not lines:
        lines += table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                        "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"], rows)
    return lines


def _assignment_text(member):
    return ",".join(f"{a['topic']}({','.join(map(str, a['partitions']))})"
                    for a in member["assignment"]) or "-"


def format_members(doc, verbose=False):
    """The members view of `groups describe --members [--verbose]`."""
    if not doc["members"]:
        return _notices(doc)
    header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        header = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                  "#PARTITIONS", "ASSIGNMENT"]
    rows = []
    for m in sorted(doc["members"], key=lambda m: m["member_id"]):
        count = sum(len(a["partitions"]) for a in m["assignment"])
        if verbose:
            rows.append([doc["group"], m["member_id"], _cell(m["group_instance_id"]),
                         _cell(m["host"]), _cell(m["client_id"]), count,
                         _assignment_text(m)])
        else:
            rows.append([doc["group"], m["member_id"], _cell(m["host"]),
                         _cell(m["client_id"]), count])
    return _notices(doc) + table(header, rows)


def format_state(doc):
    """The state view of `groups describe --state`."""
    c = doc["coordinator"]
    host = f"[{c['host']}]" if ":" in c["host"] else c["host"]
    return table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                 [[doc["group"], f"{host}:{c['port']} ({c['id']})",
                   _cell(doc["assignment_strategy"]), doc["state"], len(doc["members"])]])


async def _describe(admin, args, warnings):
    if args.members or args.state:
        doc = await admin.describe_group(args.group)
    else:
        doc = await admin.describe_offsets(args.group)
    for m in doc["members"]:
        if m["assignment_error"]:
            warnings.append(f"warning: the assignment of member {m['member_id']} does not "
                            f"decode ({m['assignment_error']}); its partitions are shown "
                            "without an owner")
    if args.json:
        return [json.dumps(doc)]
    if args.members:
        return format_members(doc, args.verbose)
    if args.state:
        return format_state(doc)
    return format_offsets(doc)


# ------------------------------------------------------------------------------ reset

def format_reset(plan):
    """The table of `groups reset-offsets`, as kafka-consumer-groups --reset-offsets
    prints it."""
    return table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                 [[plan["group"], r["topic"], r["partition"], r["new_offset"]]
                  for r in plan["offsets"]])


def _strategy(args):
    from kraftcore.admin import groups as g

    if args.to_earliest:
        return g.TO_EARLIEST, None
    if args.to_latest:
        return g.TO_LATEST, None
    if args.to_offset is not None:
        return g.TO_OFFSET, args.to_offset
    return g.SHIFT_BY, args.shift_by


async def _reset(admin, args, warnings):
    strategy, value = _strategy(args)
    plan = await admin.reset_plan(args.group, args.topic_map, strategy, value)
    warnings.extend(f"warning: {w}" for w in plan["warnings"])
    if args.execute:
        await admin.commit_offsets(args.group, {(r["topic"], r["partition"]): r["new_offset"]
                                                for r in plan["offsets"]})
    else:
        warnings.append("dry run: nothing was committed; add --execute to commit these "
                        "offsets")
    if args.json:
        return [json.dumps({"group": args.group, "executed": bool(args.execute),
                            "offsets": plan["offsets"]})]
    return format_reset(plan)


# ------------------------------------------------------------------------------ delete

async def _delete(admin, args, warnings):
    await admin.delete_group(args.group)
    if args.json:
        return [json.dumps({"deleted": [args.group]})]
    return [f"Deletion of requested consumer groups ('{args.group}') was successful."]


_COMMANDS = {
    "list": _list,
    "describe": _describe,
    "reset-offsets": _reset,
    "delete": _delete,
}
