"""Whole-request error answers: the response to any request, at its version, that fails the
request as a whole with one error code (Kafka's `AbstractRequest.getErrorResponse`).

This module owns where such an error goes in each response schema:

* into the response's top-level ErrorCode (and ErrorMessage) when the schema has one at the
  request's version;
* otherwise into every item the request named, once per distinct item, in request order
  (Produce, Fetch, ListOffsets and OffsetForLeaderEpoch per partition; CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs, DescribeConfigs;
  FindCoordinator v4+ per key, OffsetCommit per partition, OffsetFetch v0-1 per partition
  and v8+ per group, DescribeGroups and DeleteGroups per group; CreateAcls per creation,
  DeleteAcls per filter, AlterUserScramCredentials per user); ElectLeaders and Metadata
  v13 get both.

An error response never raises for the request's content: a body whose items cannot be
walked gets the top-level fields only. It holds no state.
"""

import logging

from kraftcore.errors import ControllerError
from kraftcore.protocol import messages as m
from kraftcore.protocol.apis import API_BY_KEY
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.protocol.schema import in_range
from kraftcore.types import ZERO_UUID

__all__ = ["error_response", "bare_response", "has_field", "api_name", "invalid_request"]

log = logging.getLogger("kraftcore.apis")


def api_name(key):
    """The API's name ("CreateTopics"), or "API key N" for a key kraftcore does not know."""
    api = API_BY_KEY.get(key)
    return api.name if api is not None else f"API key {key}"


def has_field(cls, attr, version):
    """Whether message class `cls` carries field `attr` at `version`."""
    for f in cls._fields:
        if f.attr == attr:
            return in_range(version, f.versions)
    return False


def invalid_request(message):
    """The refusal of a value a handler cannot take: INVALID_REQUEST with `message`."""
    return ControllerError(ErrorCode.INVALID_REQUEST, message)


def bare_response(key, version, code, message):
    """The response class of `key` with only its top-level error fields set."""
    cls = API_BY_KEY[key].response if key in API_BY_KEY else None
    if cls is None:
        raise ValueError(f"no response schema for API key {key}")
    response = cls()
    if has_field(cls, "error_code", version):
        response.error_code = int(code)
    if has_field(cls, "error_message", version):
        response.error_message = message
    return response


def _error_create_topics(version, body, code, message):
    cls = m.CreateTopicsResponse
    return cls(topics=[cls.CreatableTopicResult(name=name, error_code=code,
                                                error_message=message)
                       for name in dict.fromkeys(t.name for t in body.topics)])


def _error_delete_topics(version, body, code, message):
    cls = m.DeleteTopicsResponse
    if version >= 6:
        items = [(t.name, t.topic_id) for t in body.topics]
    else:
        items = [(name, ZERO_UUID) for name in body.topic_names]
    return cls(responses=[cls.DeletableTopicResult(name=name, topic_id=topic_id,
                                                   error_code=code, error_message=message)
                          for name, topic_id in dict.fromkeys(items)])


def _error_create_partitions(version, body, code, message):
    cls = m.CreatePartitionsResponse
    return cls(results=[cls.CreatePartitionsTopicResult(name=name, error_code=code,
                                                        error_message=message)
                        for name in dict.fromkeys(t.name for t in body.topics)])


def _error_alter_configs(version, body, code, message):
    cls = m.IncrementalAlterConfigsResponse
    keys = dict.fromkeys((r.resource_type, r.resource_name) for r in body.resources)
    return cls(responses=[cls.AlterConfigsResourceResponse(
        error_code=code, error_message=message, resource_type=rtype, resource_name=rname)
        for rtype, rname in keys])


def _error_elect_leaders(version, body, code, message):
    cls = m.ElectLeadersResponse
    response = cls()
    if version >= 1:
        response.error_code = code
    for t in body.topic_partitions or ():
        response.replica_election_results.append(cls.ReplicaElectionResult(
            topic=t.topic, partition_result=[
                cls.PartitionResult(partition_id=p, error_code=code, error_message=message)
                for p in dict.fromkeys(t.partitions)]))
    return response


def _error_metadata(version, body, code, message):
    cls = m.MetadataResponse
    response = cls()
    if version >= 13:
        response.error_code = code
    for t in body.topics or ():
        name = t.name if t.name is not None or version >= 12 else ""
        response.topics.append(cls.MetadataResponseTopic(error_code=code, name=name,
                                                         topic_id=t.topic_id))
    return response


def _error_describe_cluster(version, body, code, message):
    response = m.DescribeClusterResponse(error_code=code, error_message=message)
    if version >= 1:
        response.endpoint_type = body.endpoint_type
    return response


def _error_describe_configs(version, body, code, message):
    cls = m.DescribeConfigsResponse
    return cls(results=[cls.DescribeConfigsResult(
        error_code=code, error_message=message, resource_type=r.resource_type,
        resource_name=r.resource_name) for r in body.resources])


def _error_find_coordinator(version, body, code, message):
    cls = m.FindCoordinatorResponse
    if version < 4:
        return cls(error_code=code, error_message=message, node_id=-1, host="", port=-1)
    return cls(coordinators=[
        cls.Coordinator(key=key, node_id=-1, host="", port=-1, error_code=code,
                        error_message=message) for key in body.coordinator_keys])


def _error_offset_commit(version, body, code, message):
    cls = m.OffsetCommitResponse
    topics = []
    for t in body.topics:
        entry = cls.OffsetCommitResponseTopic(partitions=[
            cls.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                              error_code=code) for p in t.partitions])
        if version >= 10:
            entry.topic_id = t.topic_id
        else:
            entry.name = t.name
        topics.append(entry)
    return cls(topics=topics)


def _error_offset_fetch(version, body, code, message):
    cls = m.OffsetFetchResponse
    if version >= 8:
        return cls(groups=[cls.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
                           for g in body.groups])
    if version >= 2:
        return cls(error_code=code)
    # v0-1 have no group-level error: every partition asked for carries it
    return cls(topics=[cls.OffsetFetchResponseTopic(name=t.name, partitions=[
        cls.OffsetFetchResponsePartition(partition_index=i, committed_offset=-1, metadata="",
                                         error_code=code) for i in t.partition_indexes])
        for t in body.topics or ()])


def _error_describe_groups(version, body, code, message):
    cls = m.DescribeGroupsResponse
    groups = []
    for group_id in body.groups:
        entry = cls.DescribedGroup(error_code=code, group_id=group_id, group_state="",
                                   protocol_type="", protocol_data="", members=[])
        if version >= 6:
            entry.error_message = message
        groups.append(entry)
    return cls(groups=groups)


def _error_delete_groups(version, body, code, message):
    cls = m.DeleteGroupsResponse
    results = []
    for group_id in dict.fromkeys(body.groups_names):
        entry = cls.DeletableGroupResult(group_id=group_id, error_code=code)
        if version >= 3:
            entry.error_message = message
        results.append(entry)
    return cls(results=results)


def _error_create_acls(version, body, code, message):
    cls = m.CreateAclsResponse
    return cls(results=[cls.AclCreationResult(error_code=code, error_message=message)
                        for _ in body.creations])


def _error_delete_acls(version, body, code, message):
    cls = m.DeleteAclsResponse
    return cls(filter_results=[cls.DeleteAclsFilterResult(error_code=code,
                                                          error_message=message)
                               for _ in body.filters])


def _error_alter_scram(version, body, code, message):
    cls = m.AlterUserScramCredentialsResponse
    users = dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions])
    return cls(results=[cls.AlterUserScramCredentialsResult(user=user, error_code=code,
                                                            error_message=message)
                        for user in users])


def _error_produce(version, body, code, message):
    cls = m.ProduceResponse
    return cls(responses=[cls.TopicProduceResponse(
        name=t.name, topic_id=t.topic_id, partition_responses=[
            cls.PartitionProduceResponse(index=p.index, error_code=code, base_offset=-1,
                                         log_append_time_ms=-1, log_start_offset=-1,
                                         error_message=message)
            for p in t.partition_data]) for t in body.topic_data])


def _error_fetch(version, body, code, message):
    cls = m.FetchResponse
    return cls(error_code=code if version >= 7 else 0, responses=[cls.FetchableTopicResponse(
        topic=t.topic, topic_id=t.topic_id, partitions=[
            cls.PartitionData(partition_index=p.partition, error_code=code,
                              high_watermark=-1, last_stable_offset=-1, log_start_offset=-1)
            for p in t.partitions]) for t in body.topics])


def _error_list_offsets(version, body, code, message):
    cls = m.ListOffsetsResponse
    return cls(topics=[cls.ListOffsetsTopicResponse(name=t.name, partitions=[
        cls.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=code,
                                         timestamp=-1, offset=-1)
        for p in t.partitions]) for t in body.topics])


def _error_offset_for_leader_epoch(version, body, code, message):
    cls = m.OffsetForLeaderEpochResponse
    return cls(topics=[cls.OffsetForLeaderTopicResult(topic=t.topic, partitions=[
        cls.EpochEndOffset(partition=p.partition, error_code=code, leader_epoch=-1,
                           end_offset=-1) for p in t.partitions]) for t in body.topics])


_ERROR_BUILDERS = {
    0: _error_produce, 1: _error_fetch, 2: _error_list_offsets,
    23: _error_offset_for_leader_epoch,
    19: _error_create_topics, 20: _error_delete_topics, 37: _error_create_partitions,
    44: _error_alter_configs, 43: _error_elect_leaders, 3: _error_metadata,
    60: _error_describe_cluster, 32: _error_describe_configs, 10: _error_find_coordinator,
    8: _error_offset_commit, 9: _error_offset_fetch, 15: _error_describe_groups,
    42: _error_delete_groups, 30: _error_create_acls, 31: _error_delete_acls,
    51: _error_alter_scram,
}


def error_response(key, version, body, code, message=None):
    """The response to request `body` (API `key` at `version`) that fails it as a whole with
    `code`: in the top-level ErrorCode when the schema has one, else in every item the
    request named (Kafka's `getErrorResponse`)."""
    builder = _ERROR_BUILDERS.get(key)
    if builder is not None:
        try:
            return builder(version, body, int(code), message)
        except Exception:  # noqa: BLE001 - a body we cannot walk: top-level fields only
            log.warning("%s v%d: could not list the request's items in an error response",
                        api_name(key), version, exc_info=True)
    return bare_response(key, version, code, message)
