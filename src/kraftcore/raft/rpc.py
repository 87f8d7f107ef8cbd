"""The KRaft RPC bodies for the one partition the quorum replicates (`__cluster_metadata`-0):
builders for every request and response the core sends, and readers that pull the single
partition out of a received body (kafka-facts §6.3).

A body naming another topic or partition, or not exactly one, reads as None and the core
answers INVALID_REQUEST (UNKNOWN_TOPIC_OR_PARTITION for FetchSnapshot and DescribeQuorum).
"""

from kraftcore.protocol import messages as m
from kraftcore.types import METADATA_TOPIC_ID
from kraftcore.raft.config import CLUSTER_METADATA_PARTITION as PARTITION
from kraftcore.raft.config import CLUSTER_METADATA_TOPIC as TOPIC
from kraftcore.raft.types import NO_EPOCH, NO_ID, NO_OFFSET


# The versions the bodies below are built for (the newest each schema knows).
VERSIONS = {"Vote": 2, "BeginQuorumEpoch": 1, "EndQuorumEpoch": 1, "Fetch": 17,
            "FetchSnapshot": 1, "DescribeQuorum": 2}


def _only(items):
    return items[0] if items is not None and len(items) == 1 else None


def _partition(topics, topic_of, partitions_of, index_of):
    topic = _only(topics)
    if topic is None or not topic_of(topic):
        return None
    partition = _only(partitions_of(topic))
    if partition is None or index_of(partition) != PARTITION:
        return None
    return partition


def _id(value):
    return NO_ID if value is None else value


# ------------------------------------------------------------------------------ Vote

def vote_request(cluster_id, voter_id, epoch, candidate_id, last_epoch, last_offset, pre_vote):
    part = m.VoteRequest.PartitionData(
        partition_index=PARTITION, replica_epoch=epoch, replica_id=candidate_id,
        last_offset_epoch=last_epoch, last_offset=last_offset, pre_vote=pre_vote)
    return m.VoteRequest(cluster_id=cluster_id, voter_id=voter_id, topics=[
        m.VoteRequest.TopicData(topic_name=TOPIC, partitions=[part])])


def vote_partition(body):
    return _partition(body.topics, lambda t: t.topic_name == TOPIC, lambda t: t.partitions,
                      lambda p: p.partition_index)


def vote_response(error, leader_id, epoch, granted, partition_error=0):
    part = m.VoteResponse.PartitionData(
        partition_index=PARTITION, error_code=partition_error, leader_id=_id(leader_id),
        leader_epoch=epoch, vote_granted=granted)
    return m.VoteResponse(error_code=error, topics=[
        m.VoteResponse.TopicData(topic_name=TOPIC, partitions=[part])])


vote_response_partition = vote_partition


# ------------------------------------------------------------------------------ Begin/EndQuorumEpoch

def begin_quorum_epoch_request(cluster_id, voter_id, leader_id, epoch):
    part = m.BeginQuorumEpochRequest.PartitionData(
        partition_index=PARTITION, leader_id=leader_id, leader_epoch=epoch)
    return m.BeginQuorumEpochRequest(cluster_id=cluster_id, voter_id=voter_id, topics=[
        m.BeginQuorumEpochRequest.TopicData(topic_name=TOPIC, partitions=[part])])


def end_quorum_epoch_request(cluster_id, leader_id, epoch, preferred_candidates):
    cls = m.EndQuorumEpochRequest
    part = cls.PartitionData(
        partition_index=PARTITION, leader_id=leader_id, leader_epoch=epoch,
        preferred_successors=list(preferred_candidates),
        preferred_candidates=[cls.ReplicaInfo(candidate_id=c) for c in preferred_candidates])
    return cls(cluster_id=cluster_id, topics=[cls.TopicData(topic_name=TOPIC, partitions=[part])])


quorum_epoch_partition = vote_partition


def preferred_candidates(part):
    if part.preferred_candidates:
        return [c.candidate_id for c in part.preferred_candidates]
    return list(part.preferred_successors or ())


def quorum_epoch_response(cls, error, leader_id, epoch, partition_error=0):
    part = cls.PartitionData(partition_index=PARTITION, error_code=partition_error,
                             leader_id=_id(leader_id), leader_epoch=epoch)
    return cls(error_code=error, topics=[cls.TopicData(topic_name=TOPIC, partitions=[part])])


# ------------------------------------------------------------------------------ Fetch

def fetch_request(cluster_id, replica_id, epoch, fetch_offset, last_fetched_epoch,
                  max_wait_ms, max_bytes):
    cls = m.FetchRequest
    part = cls.FetchPartition(
        partition=PARTITION, current_leader_epoch=epoch, fetch_offset=fetch_offset,
        last_fetched_epoch=last_fetched_epoch, partition_max_bytes=max_bytes)
    # ReplicaId moved into the tagged ReplicaState at v15: the body is built for v15+.
    return cls(cluster_id=cluster_id, replica_state=cls.ReplicaState(replica_id=replica_id),
               max_wait_ms=max_wait_ms, min_bytes=0, max_bytes=max_bytes,
               topics=[cls.FetchTopic(topic=TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[part])])


def fetch_replica_id(body):
    state = body.replica_state
    if state is not None and state.replica_id >= 0:
        return state.replica_id
    return body.replica_id


def fetch_partition(body):
    return _partition(
        body.topics, lambda t: t.topic_id == METADATA_TOPIC_ID or t.topic == TOPIC,
        lambda t: t.partitions, lambda p: p.partition)


def fetch_response(error, leader_id, epoch, high_watermark=NO_OFFSET, log_start_offset=0,
                   records=None, diverging=None, snapshot_id=None, top_error=0):
    cls = m.FetchResponse
    part = cls.PartitionData(
        partition_index=PARTITION, error_code=error, high_watermark=high_watermark,
        log_start_offset=log_start_offset,
        current_leader=cls.LeaderIdAndEpoch(leader_id=_id(leader_id), leader_epoch=epoch),
        records=records)
    if diverging is not None:
        part.diverging_epoch = cls.EpochEndOffset(epoch=diverging[0], end_offset=diverging[1])
    if snapshot_id is not None:
        part.snapshot_id = cls.SnapshotId(end_offset=snapshot_id.end_offset,
                                          epoch=snapshot_id.epoch)
    return cls(error_code=top_error, responses=[
        cls.FetchableTopicResponse(topic=TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[part])])


def fetch_response_partition(body):
    return _partition(
        body.responses, lambda t: t.topic_id == METADATA_TOPIC_ID or t.topic == TOPIC,
        lambda t: t.partitions, lambda p: p.partition_index)


# ------------------------------------------------------------------------------ FetchSnapshot

def fetch_snapshot_request(cluster_id, replica_id, epoch, snapshot_id, position, max_bytes):
    cls = m.FetchSnapshotRequest
    part = cls.PartitionSnapshot(
        partition=PARTITION, current_leader_epoch=epoch,
        snapshot_id=cls.SnapshotId(end_offset=snapshot_id.end_offset, epoch=snapshot_id.epoch),
        position=position)
    return cls(cluster_id=cluster_id, replica_id=replica_id, max_bytes=max_bytes, topics=[
        cls.TopicSnapshot(name=TOPIC, partitions=[part])])


def fetch_snapshot_partition(body):
    return _partition(body.topics, lambda t: t.name == TOPIC, lambda t: t.partitions,
                      lambda p: p.partition if hasattr(p, "partition") else p.index)


def fetch_snapshot_response(error, leader_id, epoch, snapshot_id=None, size=0, position=0,
                            data=b"", top_error=0):
    cls = m.FetchSnapshotResponse
    end, snap_epoch = snapshot_id if snapshot_id is not None else (NO_OFFSET, NO_EPOCH)
    part = cls.PartitionSnapshot(
        index=PARTITION, error_code=error,
        snapshot_id=cls.SnapshotId(end_offset=end, epoch=snap_epoch),
        current_leader=cls.LeaderIdAndEpoch(leader_id=_id(leader_id), leader_epoch=epoch),
        size=size, position=position, unaligned_records=data)
    return cls(error_code=top_error, topics=[cls.TopicSnapshot(name=TOPIC, partitions=[part])])


# ------------------------------------------------------------------------------ DescribeQuorum

def describe_quorum_request():
    """DescribeQuorum for the metadata partition (what an admin client sends)."""
    return m.DescribeQuorumRequest(topics=[m.DescribeQuorumRequest.TopicData(
        topic_name=TOPIC, partitions=[m.DescribeQuorumRequest.PartitionData(
            partition_index=PARTITION)])])


def describe_quorum_partition(body):
    return _partition(body.topics, lambda t: t.topic_name == TOPIC, lambda t: t.partitions,
                      lambda p: p.partition_index)


def describe_quorum_response(error, leader_id=NO_ID, epoch=NO_EPOCH, high_watermark=NO_OFFSET,
                             voters=(), observers=(), message=None):
    """`voters` / `observers`: (replica id, log end offset, last fetch ms, last caught-up ms)."""
    cls = m.DescribeQuorumResponse

    def states(rows):
        return [cls.ReplicaState(replica_id=r, log_end_offset=leo, last_fetch_timestamp=fetch,
                                 last_caught_up_timestamp=caught) for r, leo, fetch, caught in rows]

    part = cls.PartitionData(
        partition_index=PARTITION, error_code=error, error_message=message,
        leader_id=_id(leader_id), leader_epoch=epoch, high_watermark=high_watermark,
        current_voters=states(voters), observers=states(observers))
    return cls(error_code=0, topics=[cls.TopicData(topic_name=TOPIC, partitions=[part])])
