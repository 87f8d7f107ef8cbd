"""Schemas of the Kafka RPCs kraftcore speaks: the KRaft quorum RPCs, the controller RPCs,
and the client APIs a KRaft broker/controller serves (kafka-facts §6.2-§6.4).

This module owns the *bodies* of these requests and responses: one `<Name>Request` and one
`<Name>Response` class per API, written with `kraftcore.protocol.schema.message` in Kafka's
terms (field names, types, version ranges, tags, defaults and `ignorable` as in Kafka's
`clients/src/main/resources/common/message/*.json`). Headers and framing are not here.
One field is kraftcore's own: the tagged `BrokerEpoch` of DescribeClusterResponse's brokers
(tag `BROKER_EPOCH_TAG`), which Kafka clients skip as an unknown tag (docs/protocol.md).

Nested struct types are named as in Kafka's schemas and hang off their message class
(`FetchRequest.FetchTopic`, `VoteRequest.PartitionData`, ...). A struct used twice in one
message (e.g. `DescribeQuorumResponse.ReplicaState`) is given its fields at its first use.

Version ranges are the widest kafka-facts §6.2 gives (e.g. Vote 0-2, Metadata 0-13), joined
with the newest Kafka schemas: the versions Kafka 4.0 dropped stay (Fetch 0-18, Produce 0-13,
ListOffsets 0-11), because older clients still send them. `kraftcore.protocol.apis` indexes
them by API key. Every class here is listed in `REQUESTS` / `RESPONSES`.

The data-plane APIs a broker serves to producers and consumers (Produce, ListOffsets,
OffsetForLeaderEpoch, FindCoordinator, OffsetCommit, OffsetFetch, InitProducerId) and the
broker-to-controller AllocateProducerIds have their own section below.
"""

from kraftcore.protocol.schema import Field as F, adopt, message

_INT64_MAX = 0x7FFFFFFFFFFFFFFF

# Field groups that several messages share (each call builds fresh Field objects: a schema
# owns its fields).
def _raft_node_endpoints(versions="1+"):
    """The leader's endpoints in KRaft responses (tagged 0; ports are uint16)."""
    return F("NodeEndpoints", "[]NodeEndpoint", versions, tag=0, fields=[
        F("NodeId", "int32", versions),
        F("Host", "string", versions),
        F("Port", "uint16", versions),
    ])


def _leader_endpoints():
    return F("LeaderEndpoints", "[]LeaderEndpoint", "1+", ignorable=True, fields=[
        F("Name", "string", "1+"),
        F("Host", "string", "1+"),
        F("Port", "uint16", "1+"),
    ])


def _listeners(security_protocol):
    fields = [F("Name", "string"), F("Host", "string"), F("Port", "uint16")]
    if security_protocol:
        fields.append(F("SecurityProtocol", "int16"))
    return F("Listeners", "[]Listener", fields=fields)


def _supported_features():
    return F("Features", "[]Feature", fields=[
        F("Name", "string"),
        F("MinSupportedVersion", "int16"),
        F("MaxSupportedVersion", "int16"),
    ])


def _quorum_epoch_response(name, api_key):
    """BeginQuorumEpoch and EndQuorumEpoch answer with the same shape."""
    return message(name, kind="response", api_key=api_key, valid="0-1", flexible="1+", fields=[
        F("ErrorCode", "int16"),
        F("Topics", "[]TopicData", fields=[
            F("TopicName", "string"),
            F("Partitions", "[]PartitionData", fields=[
                F("PartitionIndex", "int32"),
                F("ErrorCode", "int16"),
                F("LeaderId", "int32"),
                F("LeaderEpoch", "int32"),
            ]),
        ]),
        _raft_node_endpoints(),
    ])


def _voter_change_response(name, api_key):
    """AddRaftVoter and RemoveRaftVoter answer with the same shape."""
    return message(name, kind="response", api_key=api_key, valid="0", flexible="0+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("ErrorCode", "int16"),
        F("ErrorMessage", "string", nullable="0+", default=None, ignorable=True),
    ])


# ------------------------------------------------------------------------------ ApiVersions

ApiVersionsRequest = message(
    "ApiVersionsRequest", kind="request", api_key=18, valid="0-4", flexible="3+", fields=[
        F("ClientSoftwareName", "string", "3+", ignorable=True),
        F("ClientSoftwareVersion", "string", "3+", ignorable=True),
    ])

ApiVersionsResponse = message(
    "ApiVersionsResponse", kind="response", api_key=18, valid="0-4", flexible="3+", fields=[
        F("ErrorCode", "int16"),
        F("ApiKeys", "[]ApiVersion", fields=[
            F("ApiKey", "int16"),
            F("MinVersion", "int16"),
            F("MaxVersion", "int16"),
        ]),
        F("ThrottleTimeMs", "int32", "1+", ignorable=True),
        F("SupportedFeatures", "[]SupportedFeatureKey", "3+", tag=0, ignorable=True, fields=[
            F("Name", "string", "3+"),
            F("MinVersion", "int16", "3+"),
            F("MaxVersion", "int16", "3+"),
        ]),
        F("FinalizedFeaturesEpoch", "int64", "3+", tag=1, default=-1, ignorable=True),
        F("FinalizedFeatures", "[]FinalizedFeatureKey", "3+", tag=2, ignorable=True, fields=[
            F("Name", "string", "3+"),
            F("MaxVersionLevel", "int16", "3+"),
            F("MinVersionLevel", "int16", "3+"),
        ]),
        F("ZkMigrationReady", "bool", "3+", tag=3, default=False, ignorable=True),
    ])

# ------------------------------------------------------------------------------ Fetch

FetchRequest = message(
    "FetchRequest", kind="request", api_key=1, valid="0-18", flexible="12+", fields=[
        F("ClusterId", "string", "12+", nullable="12+", tag=0, default=None, ignorable=True),
        F("ReplicaId", "int32", "0-14", default=-1),
        F("ReplicaState", "ReplicaState", "15+", tag=1, fields=[
            F("ReplicaId", "int32", "15+", default=-1),
            F("ReplicaEpoch", "int64", "15+", default=-1),
        ]),
        F("MaxWaitMs", "int32"),
        F("MinBytes", "int32"),
        F("MaxBytes", "int32", "3+", default=0x7fffffff, ignorable=True),
        F("IsolationLevel", "int8", "4+", default=0, ignorable=True),
        F("SessionId", "int32", "7+", default=0, ignorable=True),
        F("SessionEpoch", "int32", "7+", default=-1, ignorable=True),
        F("Topics", "[]FetchTopic", fields=[
            F("Topic", "string", "0-12", ignorable=True),
            F("TopicId", "uuid", "13+", ignorable=True),
            F("Partitions", "[]FetchPartition", fields=[
                F("Partition", "int32"),
                F("CurrentLeaderEpoch", "int32", "9+", default=-1, ignorable=True),
                F("FetchOffset", "int64"),
                F("LastFetchedEpoch", "int32", "12+", default=-1),
                F("LogStartOffset", "int64", "5+", default=-1, ignorable=True),
                F("PartitionMaxBytes", "int32"),
                F("ReplicaDirectoryId", "uuid", "17+", tag=0, ignorable=True),
                # v18: the follower's high watermark (KIP-1166); "unknown" is int64 max.
                F("HighWatermark", "int64", "18+", tag=1, default=_INT64_MAX, ignorable=True),
            ]),
        ]),
        F("ForgottenTopicsData", "[]ForgottenTopic", "7+", fields=[
            F("Topic", "string", "7-12", ignorable=True),
            F("TopicId", "uuid", "13+", ignorable=True),
            F("Partitions", "[]int32", "7+"),
        ]),
        F("RackId", "string", "11+", default="", ignorable=True),
    ])

FetchResponse = message(
    "FetchResponse", kind="response", api_key=1, valid="0-18", flexible="12+", fields=[
        F("ThrottleTimeMs", "int32", "1+", ignorable=True),
        F("ErrorCode", "int16", "7+", ignorable=True),
        F("SessionId", "int32", "7+", default=0),
        F("Responses", "[]FetchableTopicResponse", fields=[
            F("Topic", "string", "0-12", ignorable=True),
            F("TopicId", "uuid", "13+", ignorable=True),
            F("Partitions", "[]PartitionData", fields=[
                F("PartitionIndex", "int32"),
                F("ErrorCode", "int16"),
                F("HighWatermark", "int64"),
                F("LastStableOffset", "int64", "4+", default=-1, ignorable=True),
                F("LogStartOffset", "int64", "5+", default=-1, ignorable=True),
                F("DivergingEpoch", "EpochEndOffset", "12+", tag=0, fields=[
                    F("Epoch", "int32", "12+", default=-1),
                    F("EndOffset", "int64", "12+", default=-1),
                ]),
                F("CurrentLeader", "LeaderIdAndEpoch", "12+", tag=1, fields=[
                    F("LeaderId", "int32", "12+", default=-1),
                    F("LeaderEpoch", "int32", "12+", default=-1),
                ]),
                F("SnapshotId", "SnapshotId", "12+", tag=2, fields=[
                    F("EndOffset", "int64", default=-1),
                    F("Epoch", "int32", default=-1),
                ]),
                F("AbortedTransactions", "[]AbortedTransaction", "4+", nullable="4+",
                  ignorable=True, fields=[
                    F("ProducerId", "int64", "4+"),
                    F("FirstOffset", "int64", "4+"),
                ]),
                F("PreferredReadReplica", "int32", "11+", default=-1),
                F("Records", "records", nullable="0+"),
            ]),
        ]),
        F("NodeEndpoints", "[]NodeEndpoint", "16+", tag=0, fields=[
            F("NodeId", "int32", "16+"),
            F("Host", "string", "16+"),
            F("Port", "int32", "16+"),
            F("Rack", "string", "16+", nullable="16+", default=None),
        ]),
    ])

# ------------------------------------------------------------------------------ KRaft RPCs

VoteRequest = message(
    "VoteRequest", kind="request", api_key=52, valid="0-2", flexible="0+", fields=[
        F("ClusterId", "string", nullable="0+", default=None),
        F("VoterId", "int32", "1+", default=-1, ignorable=True),
        F("Topics", "[]TopicData", fields=[
            F("TopicName", "string"),
            F("Partitions", "[]PartitionData", fields=[
                F("PartitionIndex", "int32"),
                F("ReplicaEpoch", "int32"),
                F("ReplicaId", "int32"),
                F("ReplicaDirectoryId", "uuid", "1+", ignorable=True),
                F("VoterDirectoryId", "uuid", "1+", ignorable=True),
                F("LastOffsetEpoch", "int32"),
                F("LastOffset", "int64"),
                F("PreVote", "bool", "2+"),
            ]),
        ]),
    ])

VoteResponse = message(
    "VoteResponse", kind="response", api_key=52, valid="0-2", flexible="0+", fields=[
        F("ErrorCode", "int16"),
        F("Topics", "[]TopicData", fields=[
            F("TopicName", "string"),
            F("Partitions", "[]PartitionData", fields=[
                F("PartitionIndex", "int32"),
                F("ErrorCode", "int16"),
                F("LeaderId", "int32"),
                F("LeaderEpoch", "int32"),
                F("VoteGranted", "bool"),
            ]),
        ]),
        _raft_node_endpoints(),
    ])

BeginQuorumEpochRequest = message(
    "BeginQuorumEpochRequest", kind="request", api_key=53, valid="0-1", flexible="1+", fields=[
        F("ClusterId", "string", nullable="0+", default=None),
        F("VoterId", "int32", "1+", default=-1, ignorable=True),
        F("Topics", "[]TopicData", fields=[
            F("TopicName", "string"),
            F("Partitions", "[]PartitionData", fields=[
                F("PartitionIndex", "int32"),
                F("VoterDirectoryId", "uuid", "1+", ignorable=True),
                F("LeaderId", "int32"),
                F("LeaderEpoch", "int32"),
            ]),
        ]),
        _leader_endpoints(),
    ])

BeginQuorumEpochResponse = _quorum_epoch_response("BeginQuorumEpochResponse", 53)

EndQuorumEpochRequest = message(
    "EndQuorumEpochRequest", kind="request", api_key=54, valid="0-1", flexible="1+", fields=[
        F("ClusterId", "string", nullable="0+", default=None),
        F("Topics", "[]TopicData", fields=[
            F("TopicName", "string"),
            F("Partitions", "[]PartitionData", fields=[
                F("PartitionIndex", "int32"),
                F("LeaderId", "int32"),
                F("LeaderEpoch", "int32"),
                F("PreferredSuccessors", "[]int32", "0", ignorable=True),
                F("PreferredCandidates", "[]ReplicaInfo", "1+", ignorable=True, fields=[
                    F("CandidateId", "int32", "1+"),
                    F("CandidateDirectoryId", "uuid", "1+"),
                ]),
            ]),
        ]),
        _leader_endpoints(),
    ])

EndQuorumEpochResponse = _quorum_epoch_response("EndQuorumEpochResponse", 54)

FetchSnapshotRequest = message(
    "FetchSnapshotRequest", kind="request", api_key=59, valid="0-1", flexible="0+", fields=[
        F("ClusterId", "string", nullable="0+", tag=0, default=None),
        F("ReplicaId", "int32", default=-1),
        F("MaxBytes", "int32", default=0x7FFFFFFF),
        F("Topics", "[]TopicSnapshot", fields=[
            F("Name", "string"),
            F("Partitions", "[]PartitionSnapshot", fields=[
                F("Partition", "int32"),
                F("CurrentLeaderEpoch", "int32"),
                F("SnapshotId", "SnapshotId", fields=[
                    F("EndOffset", "int64"),
                    F("Epoch", "int32"),
                ]),
                F("Position", "int64"),
                F("ReplicaDirectoryId", "uuid", "1+", tag=0),
            ]),
        ]),
    ])

FetchSnapshotResponse = message(
    "FetchSnapshotResponse", kind="response", api_key=59, valid="0-1", flexible="0+", fields=[
        F("ThrottleTimeMs", "int32", ignorable=True),
        F("ErrorCode", "int16"),
        F("Topics", "[]TopicSnapshot", fields=[
            F("Name", "string"),
            F("Partitions", "[]PartitionSnapshot", fields=[
                F("Index", "int32"),
                F("ErrorCode", "int16"),
                F("SnapshotId", "SnapshotId", fields=[
                    F("EndOffset", "int64"),
                    F("Epoch", "int32"),
                ]),
                F("CurrentLeader", "LeaderIdAndEpoch", tag=0, fields=[
                    F("LeaderId", "int32"),
                    F("LeaderEpoch", "int32"),
                ]),
                F("Size", "int64"),
                F("Position", "int64"),
                # Kafka's default for records is null, but the field is not nullable.
                F("UnalignedRecords", "records", default=b""),
            ]),
        ]),
        _raft_node_endpoints(),
    ])

AddRaftVoterRequest = message(
    "AddRaftVoterRequest", kind="request", api_key=80, valid="0", flexible="0+", fields=[
        F("ClusterId", "string", nullable="0+", default=None),
        F("TimeoutMs", "int32"),
        F("VoterId", "int32"),
        F("VoterDirectoryId", "uuid"),
        _listeners(security_protocol=False),
    ])

AddRaftVoterResponse = _voter_change_response("AddRaftVoterResponse", 80)

RemoveRaftVoterRequest = message(
    "RemoveRaftVoterRequest", kind="request", api_key=81, valid="0", flexible="0+", fields=[
        F("ClusterId", "string", nullable="0+", default=None),
        F("VoterId", "int32"),
        F("VoterDirectoryId", "uuid"),
    ])

RemoveRaftVoterResponse = _voter_change_response("RemoveRaftVoterResponse", 81)

UpdateRaftVoterRequest = message(
    "UpdateRaftVoterRequest", kind="request", api_key=82, valid="0", flexible="0+", fields=[
        F("ClusterId", "string", nullable="0+", default=None),
        F("CurrentLeaderEpoch", "int32"),
        F("VoterId", "int32"),
        F("VoterDirectoryId", "uuid"),
        _listeners(security_protocol=False),
        F("KRaftVersionFeature", "KRaftVersionFeature", fields=[
            F("MinSupportedVersion", "int16"),
            F("MaxSupportedVersion", "int16"),
        ]),
    ])

UpdateRaftVoterResponse = message(
    "UpdateRaftVoterResponse", kind="response", api_key=82, valid="0", flexible="0+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("ErrorCode", "int16"),
        F("CurrentLeader", "CurrentLeader", tag=0, fields=[
            F("LeaderId", "int32", default=-1),
            F("LeaderEpoch", "int32", default=-1),
            F("Host", "string"),
            F("Port", "int32"),
        ]),
    ])

# ------------------------------------------------------------------------------ controller RPCs

BrokerRegistrationRequest = message(
    "BrokerRegistrationRequest", kind="request", api_key=62, valid="0-4", flexible="0+", fields=[
        F("BrokerId", "int32"),
        F("ClusterId", "string"),
        F("IncarnationId", "uuid"),
        _listeners(security_protocol=True),
        _supported_features(),
        F("Rack", "string", nullable="0+"),
        F("IsMigratingZkBroker", "bool", "1+", default=False),
        F("LogDirs", "[]uuid", "2+"),
        F("PreviousBrokerEpoch", "int64", "3+", default=-1, ignorable=True),
    ])

BrokerRegistrationResponse = message(
    "BrokerRegistrationResponse", kind="response", api_key=62, valid="0-4", flexible="0+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("ErrorCode", "int16"),
        F("BrokerEpoch", "int64", default=-1),
    ])

BrokerHeartbeatRequest = message(
    "BrokerHeartbeatRequest", kind="request", api_key=63, valid="0-1", flexible="0+", fields=[
        F("BrokerId", "int32"),
        F("BrokerEpoch", "int64", default=-1),
        F("CurrentMetadataOffset", "int64"),
        F("WantFence", "bool"),
        F("WantShutDown", "bool"),
        F("OfflineLogDirs", "[]uuid", "1+", tag=0),
    ])

BrokerHeartbeatResponse = message(
    "BrokerHeartbeatResponse", kind="response", api_key=63, valid="0-1", flexible="0+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("ErrorCode", "int16"),
        F("IsCaughtUp", "bool", default=False),
        F("IsFenced", "bool", default=True),
        F("ShouldShutDown", "bool"),
    ])

UnregisterBrokerRequest = message(
    "UnregisterBrokerRequest", kind="request", api_key=64, valid="0", flexible="0+", fields=[
        F("BrokerId", "int32"),
    ])

UnregisterBrokerResponse = message(
    "UnregisterBrokerResponse", kind="response", api_key=64, valid="0", flexible="0+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("ErrorCode", "int16"),
        F("ErrorMessage", "string", nullable="0+", default=None),
    ])

ControllerRegistrationRequest = message(
    "ControllerRegistrationRequest", kind="request", api_key=70, valid="0", flexible="0+",
    fields=[
        F("ControllerId", "int32"),
        F("IncarnationId", "uuid"),
        F("ZkMigrationReady", "bool"),
        _listeners(security_protocol=True),
        _supported_features(),
    ])

ControllerRegistrationResponse = message(
    "ControllerRegistrationResponse", kind="response", api_key=70, valid="0", flexible="0+",
    fields=[
        F("ThrottleTimeMs", "int32"),
        F("ErrorCode", "int16"),
        F("ErrorMessage", "string", nullable="0+", default=None),
    ])

AlterPartitionRequest = message(
    "AlterPartitionRequest", kind="request", api_key=56, valid="0-3", flexible="0+", fields=[
        F("BrokerId", "int32"),
        F("BrokerEpoch", "int64", default=-1),
        F("Topics", "[]TopicData", fields=[
            F("TopicName", "string", "0-1", ignorable=True),
            F("TopicId", "uuid", "2+", ignorable=True),
            F("Partitions", "[]PartitionData", fields=[
                F("PartitionIndex", "int32"),
                F("LeaderEpoch", "int32"),
                F("NewIsr", "[]int32", "0-2"),
                F("NewIsrWithEpochs", "[]BrokerState", "3+", fields=[
                    F("BrokerId", "int32", "3+"),
                    F("BrokerEpoch", "int64", "3+", default=-1),
                ]),
                F("LeaderRecoveryState", "int8", "1+", default=0),
                F("PartitionEpoch", "int32"),
            ]),
        ]),
    ])

AlterPartitionResponse = message(
    "AlterPartitionResponse", kind="response", api_key=56, valid="0-3", flexible="0+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("ErrorCode", "int16"),
        F("Topics", "[]TopicData", fields=[
            F("TopicName", "string", "0-1", ignorable=True),
            F("TopicId", "uuid", "2+", ignorable=True),
            F("Partitions", "[]PartitionData", fields=[
                F("PartitionIndex", "int32"),
                F("ErrorCode", "int16"),
                F("LeaderId", "int32"),
                F("LeaderEpoch", "int32"),
                F("Isr", "[]int32"),
                F("LeaderRecoveryState", "int8", "1+", default=0),
                F("PartitionEpoch", "int32"),
            ]),
        ]),
    ])

# ------------------------------------------------------------------------------ DescribeQuorum

DescribeQuorumRequest = message(
    "DescribeQuorumRequest", kind="request", api_key=55, valid="0-2", flexible="0+", fields=[
        F("Topics", "[]TopicData", fields=[
            F("TopicName", "string"),
            F("Partitions", "[]PartitionData", fields=[
                F("PartitionIndex", "int32"),
            ]),
        ]),
    ])

DescribeQuorumResponse = message(
    "DescribeQuorumResponse", kind="response", api_key=55, valid="0-2", flexible="0+", fields=[
        F("ErrorCode", "int16"),
        F("ErrorMessage", "string", "2+", nullable="2+", ignorable=True),
        F("Topics", "[]TopicData", fields=[
            F("TopicName", "string"),
            F("Partitions", "[]PartitionData", fields=[
                F("PartitionIndex", "int32"),
                F("ErrorCode", "int16"),
                F("ErrorMessage", "string", "2+", nullable="2+", ignorable=True),
                F("LeaderId", "int32"),
                F("LeaderEpoch", "int32"),
                F("HighWatermark", "int64"),
                F("CurrentVoters", "[]ReplicaState", fields=[
                    F("ReplicaId", "int32"),
                    F("ReplicaDirectoryId", "uuid", "2+"),
                    F("LogEndOffset", "int64"),
                    F("LastFetchTimestamp", "int64", "1+", default=-1, ignorable=True),
                    F("LastCaughtUpTimestamp", "int64", "1+", default=-1, ignorable=True),
                ]),
                F("Observers", "[]ReplicaState"),
            ]),
        ]),
        F("Nodes", "[]Node", "2+", fields=[
            F("NodeId", "int32", "2+"),
            F("Listeners", "[]Listener", "2+", fields=[
                F("Name", "string", "2+"),
                F("Host", "string", "2+"),
                F("Port", "uint16", "2+"),
            ]),
        ]),
    ])

# ------------------------------------------------------------------------------ client / admin APIs

MetadataRequest = message(
    "MetadataRequest", kind="request", api_key=3, valid="0-13", flexible="9+", fields=[
        F("Topics", "[]MetadataRequestTopic", nullable="1+", fields=[
            F("TopicId", "uuid", "10+", ignorable=True),
            F("Name", "string", nullable="10+"),
        ]),
        F("AllowAutoTopicCreation", "bool", "4+", default=True),
        F("IncludeClusterAuthorizedOperations", "bool", "8-10"),
        F("IncludeTopicAuthorizedOperations", "bool", "8+"),
    ])

MetadataResponse = message(
    "MetadataResponse", kind="response", api_key=3, valid="0-13", flexible="9+", fields=[
        F("ThrottleTimeMs", "int32", "3+", ignorable=True),
        F("Brokers", "[]MetadataResponseBroker", fields=[
            F("NodeId", "int32"),
            F("Host", "string"),
            F("Port", "int32"),
            F("Rack", "string", "1+", nullable="1+", default=None, ignorable=True),
        ]),
        F("ClusterId", "string", "2+", nullable="2+", default=None, ignorable=True),
        F("ControllerId", "int32", "1+", default=-1, ignorable=True),
        F("Topics", "[]MetadataResponseTopic", fields=[
            F("ErrorCode", "int16"),
            F("Name", "string", nullable="12+"),
            F("TopicId", "uuid", "10+", ignorable=True),
            F("IsInternal", "bool", "1+", default=False, ignorable=True),
            F("Partitions", "[]MetadataResponsePartition", fields=[
                F("ErrorCode", "int16"),
                F("PartitionIndex", "int32"),
                F("LeaderId", "int32"),
                F("LeaderEpoch", "int32", "7+", default=-1, ignorable=True),
                F("ReplicaNodes", "[]int32"),
                F("IsrNodes", "[]int32"),
                F("OfflineReplicas", "[]int32", "5+", ignorable=True),
            ]),
            F("TopicAuthorizedOperations", "int32", "8+", default=-2147483648),
        ]),
        F("ClusterAuthorizedOperations", "int32", "8-10", default=-2147483648),
        F("ErrorCode", "int16", "13+", ignorable=True),
    ])

CreateTopicsRequest = message(
    "CreateTopicsRequest", kind="request", api_key=19, valid="0-7", flexible="5+", fields=[
        F("Topics", "[]CreatableTopic", fields=[
            F("Name", "string"),
            F("NumPartitions", "int32"),
            F("ReplicationFactor", "int16"),
            F("Assignments", "[]CreatableReplicaAssignment", fields=[
                F("PartitionIndex", "int32"),
                F("BrokerIds", "[]int32"),
            ]),
            F("Configs", "[]CreatableTopicConfig", fields=[
                F("Name", "string"),
                F("Value", "string", nullable="0+"),
            ]),
        ]),
        F("timeoutMs", "int32", default=60000),
        F("validateOnly", "bool", "1+", default=False),
    ])

CreateTopicsResponse = message(
    "CreateTopicsResponse", kind="response", api_key=19, valid="0-7", flexible="5+", fields=[
        F("ThrottleTimeMs", "int32", "2+", ignorable=True),
        F("Topics", "[]CreatableTopicResult", fields=[
            F("Name", "string"),
            F("TopicId", "uuid", "7+", ignorable=True),
            F("ErrorCode", "int16"),
            F("ErrorMessage", "string", "1+", nullable="0+", ignorable=True),
            F("TopicConfigErrorCode", "int16", "5+", tag=0, ignorable=True),
            F("NumPartitions", "int32", "5+", default=-1, ignorable=True),
            F("ReplicationFactor", "int16", "5+", default=-1, ignorable=True),
            F("Configs", "[]CreatableTopicConfigs", "5+", nullable="5+", ignorable=True, fields=[
                F("Name", "string", "5+"),
                F("Value", "string", "5+", nullable="5+"),
                F("ReadOnly", "bool", "5+"),
                F("ConfigSource", "int8", "5+", default=-1, ignorable=True),
                F("IsSensitive", "bool", "5+"),
            ]),
        ]),
    ])

DeleteTopicsRequest = message(
    "DeleteTopicsRequest", kind="request", api_key=20, valid="0-6", flexible="4+", fields=[
        F("Topics", "[]DeleteTopicState", "6+", fields=[
            F("Name", "string", "6+", nullable="6+", default=None),
            F("TopicId", "uuid", "6+"),
        ]),
        F("TopicNames", "[]string", "0-5", ignorable=True),
        F("TimeoutMs", "int32"),
    ])

DeleteTopicsResponse = message(
    "DeleteTopicsResponse", kind="response", api_key=20, valid="0-6", flexible="4+", fields=[
        F("ThrottleTimeMs", "int32", "1+", ignorable=True),
        F("Responses", "[]DeletableTopicResult", fields=[
            F("Name", "string", nullable="6+"),
            F("TopicId", "uuid", "6+", ignorable=True),
            F("ErrorCode", "int16"),
            F("ErrorMessage", "string", "5+", nullable="5+", default=None, ignorable=True),
        ]),
    ])

CreatePartitionsRequest = message(
    "CreatePartitionsRequest", kind="request", api_key=37, valid="0-3", flexible="2+", fields=[
        F("Topics", "[]CreatePartitionsTopic", fields=[
            F("Name", "string"),
            F("Count", "int32"),
            F("Assignments", "[]CreatePartitionsAssignment", nullable="0+", fields=[
                F("BrokerIds", "[]int32"),
            ]),
        ]),
        F("TimeoutMs", "int32"),
        F("ValidateOnly", "bool"),
    ])

CreatePartitionsResponse = message(
    "CreatePartitionsResponse", kind="response", api_key=37, valid="0-3", flexible="2+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("Results", "[]CreatePartitionsTopicResult", fields=[
            F("Name", "string"),
            F("ErrorCode", "int16"),
            F("ErrorMessage", "string", nullable="0+", default=None),
        ]),
    ])

IncrementalAlterConfigsRequest = message(
    "IncrementalAlterConfigsRequest", kind="request", api_key=44, valid="0-1", flexible="1+",
    fields=[
        F("Resources", "[]AlterConfigsResource", fields=[
            F("ResourceType", "int8"),
            F("ResourceName", "string"),
            F("Configs", "[]AlterableConfig", fields=[
                F("Name", "string"),
                F("ConfigOperation", "int8"),
                F("Value", "string", nullable="0+"),
            ]),
        ]),
        F("ValidateOnly", "bool"),
    ])

IncrementalAlterConfigsResponse = message(
    "IncrementalAlterConfigsResponse", kind="response", api_key=44, valid="0-1", flexible="1+",
    fields=[
        F("ThrottleTimeMs", "int32"),
        F("Responses", "[]AlterConfigsResourceResponse", fields=[
            F("ErrorCode", "int16"),
            F("ErrorMessage", "string", nullable="0+"),
            F("ResourceType", "int8"),
            F("ResourceName", "string"),
        ]),
    ])

# IncludeSynonyms / IncludeDocumentation are not ignorable: asking for them at a version
# that lacks them is an EncodeError. IsDefault exists only in v0; ConfigSource replaces it
# from v1 (its -1 default is a placeholder, the sender always sets it).
DescribeConfigsRequest = message(
    "DescribeConfigsRequest", kind="request", api_key=32, valid="0-4", flexible="4+", fields=[
        F("Resources", "[]DescribeConfigsResource", fields=[
            F("ResourceType", "int8"),
            F("ResourceName", "string"),
            F("ConfigurationKeys", "[]string", nullable="0+"),
        ]),
        F("IncludeSynonyms", "bool", "1+", default=False),
        F("IncludeDocumentation", "bool", "3+", default=False),
    ])

DescribeConfigsResponse = message(
    "DescribeConfigsResponse", kind="response", api_key=32, valid="0-4", flexible="4+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("Results", "[]DescribeConfigsResult", fields=[
            F("ErrorCode", "int16"),
            F("ErrorMessage", "string", nullable="0+", default=None),
            F("ResourceType", "int8"),
            F("ResourceName", "string"),
            F("Configs", "[]DescribeConfigsResourceResult", fields=[
                F("Name", "string"),
                F("Value", "string", nullable="0+"),
                F("ReadOnly", "bool"),
                F("IsDefault", "bool", "0"),
                F("ConfigSource", "int8", "1+", default=-1, ignorable=True),
                F("IsSensitive", "bool"),
                F("Synonyms", "[]DescribeConfigsSynonym", "1+", ignorable=True, fields=[
                    F("Name", "string", "1+"),
                    F("Value", "string", "1+", nullable="0+"),
                    F("Source", "int8", "1+"),
                ]),
                F("ConfigType", "int8", "3+", default=0, ignorable=True),
                F("Documentation", "string", "3+", nullable="0+", default=None,
                  ignorable=True),
            ]),
        ]),
    ])

ElectLeadersRequest = message(
    "ElectLeadersRequest", kind="request", api_key=43, valid="0-2", flexible="2+", fields=[
        F("ElectionType", "int8", "1+"),
        F("TopicPartitions", "[]TopicPartitions", nullable="0+", fields=[
            F("Topic", "string"),
            F("Partitions", "[]int32"),
        ]),
        F("TimeoutMs", "int32", default=60000),
    ])

ElectLeadersResponse = message(
    "ElectLeadersResponse", kind="response", api_key=43, valid="0-2", flexible="2+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("ErrorCode", "int16", "1+"),
        F("ReplicaElectionResults", "[]ReplicaElectionResult", fields=[
            F("Topic", "string"),
            F("PartitionResult", "[]PartitionResult", fields=[
                F("PartitionId", "int32"),
                F("ErrorCode", "int16"),
                F("ErrorMessage", "string", nullable="0+"),
            ]),
        ]),
    ])

# The tag of DescribeClusterResponse.DescribeClusterBroker.BrokerEpoch (kraftcore only).
BROKER_EPOCH_TAG = 10000

DescribeClusterRequest = message(
    "DescribeClusterRequest", kind="request", api_key=60, valid="0-2", flexible="0+", fields=[
        F("IncludeClusterAuthorizedOperations", "bool"),
        F("EndpointType", "int8", "1+", default=1),
        F("IncludeFencedBrokers", "bool", "2+"),
    ])

DescribeClusterResponse = message(
    "DescribeClusterResponse", kind="response", api_key=60, valid="0-2", flexible="0+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("ErrorCode", "int16"),
        F("ErrorMessage", "string", nullable="0+", default=None),
        F("EndpointType", "int8", "1+", default=1),
        F("ClusterId", "string"),
        F("ControllerId", "int32", default=-1),
        F("Brokers", "[]DescribeClusterBroker", fields=[
            F("BrokerId", "int32"),
            F("Host", "string"),
            F("Port", "int32"),
            F("Rack", "string", nullable="0+", default=None),
            F("IsFenced", "bool", "2+"),
            # kraftcore's extension, not in Kafka's schema: the broker's registration epoch.
            # A high tag Kafka is unlikely to use; Kafka clients skip it as an unknown tag.
            F("BrokerEpoch", "int64", tag=BROKER_EPOCH_TAG, default=-1),
        ]),
        F("ClusterAuthorizedOperations", "int32", default=-2147483648),
    ])

# ------------------------------------------------------------------------------ data-plane APIs

# Produce: v0-2 carry message format v0/v1 batches, v3 adds the transactional id (and format
# v2), v9 is the first flexible version, v10 adds the leader hints of KIP-951, v13 names
# topics by id. Kafka 4.0 stopped accepting v0-2; kraftcore still reads them.
ProduceRequest = message(
    "ProduceRequest", kind="request", api_key=0, valid="0-13", flexible="9+", fields=[
        F("TransactionalId", "string", "3+", nullable="3+", default=None),
        F("Acks", "int16"),
        F("TimeoutMs", "int32"),
        F("TopicData", "[]TopicProduceData", fields=[
            F("Name", "string", "0-12", ignorable=True),
            F("TopicId", "uuid", "13+", ignorable=True),
            F("PartitionData", "[]PartitionProduceData", fields=[
                F("Index", "int32"),
                F("Records", "records", nullable="0+"),
            ]),
        ]),
    ])

ProduceResponse = message(
    "ProduceResponse", kind="response", api_key=0, valid="0-13", flexible="9+", fields=[
        F("Responses", "[]TopicProduceResponse", fields=[
            F("Name", "string", "0-12", ignorable=True),
            F("TopicId", "uuid", "13+", ignorable=True),
            F("PartitionResponses", "[]PartitionProduceResponse", fields=[
                F("Index", "int32"),
                F("ErrorCode", "int16"),
                F("BaseOffset", "int64"),
                F("LogAppendTimeMs", "int64", "2+", default=-1, ignorable=True),
                F("LogStartOffset", "int64", "5+", default=-1, ignorable=True),
                F("RecordErrors", "[]BatchIndexAndErrorMessage", "8+", ignorable=True, fields=[
                    F("BatchIndex", "int32", "8+"),
                    F("BatchIndexErrorMessage", "string", "8+", nullable="8+", default=None),
                ]),
                F("ErrorMessage", "string", "8+", nullable="8+", default=None, ignorable=True),
                F("CurrentLeader", "LeaderIdAndEpoch", "10+", tag=0, fields=[
                    F("LeaderId", "int32", "10+", default=-1),
                    F("LeaderEpoch", "int32", "10+", default=-1),
                ]),
            ]),
        ]),
        F("ThrottleTimeMs", "int32", "1+", default=0, ignorable=True),
        F("NodeEndpoints", "[]NodeEndpoint", "10+", tag=0, fields=[
            F("NodeId", "int32", "10+"),
            F("Host", "string", "10+"),
            F("Port", "int32", "10+"),
            F("Rack", "string", "10+", nullable="10+", default=None),
        ]),
    ])

# ListOffsets: v0 answers a list of offsets (MaxNumOffsets / OldStyleOffsets), v1+ one
# timestamp and offset per partition. v11 changes no field (it admits the timestamp -6).
ListOffsetsRequest = message(
    "ListOffsetsRequest", kind="request", api_key=2, valid="0-11", flexible="6+", fields=[
        F("ReplicaId", "int32"),
        F("IsolationLevel", "int8", "2+"),
        F("Topics", "[]ListOffsetsTopic", fields=[
            F("Name", "string"),
            F("Partitions", "[]ListOffsetsPartition", fields=[
                F("PartitionIndex", "int32"),
                F("CurrentLeaderEpoch", "int32", "4+", default=-1, ignorable=True),
                F("Timestamp", "int64"),
                F("MaxNumOffsets", "int32", "0", default=1),
            ]),
        ]),
        F("TimeoutMs", "int32", "10+", ignorable=True),
    ])

ListOffsetsResponse = message(
    "ListOffsetsResponse", kind="response", api_key=2, valid="0-11", flexible="6+", fields=[
        F("ThrottleTimeMs", "int32", "2+", ignorable=True),
        F("Topics", "[]ListOffsetsTopicResponse", fields=[
            F("Name", "string"),
            F("Partitions", "[]ListOffsetsPartitionResponse", fields=[
                F("PartitionIndex", "int32"),
                F("ErrorCode", "int16"),
                F("OldStyleOffsets", "[]int64", "0"),
                F("Timestamp", "int64", "1+", default=-1),
                F("Offset", "int64", "1+", default=-1),
                F("LeaderEpoch", "int32", "4+", default=-1),
            ]),
        ]),
    ])

# OffsetForLeaderEpoch: a consumer (ReplicaId -2) or a follower asks where an epoch ends.
OffsetForLeaderEpochRequest = message(
    "OffsetForLeaderEpochRequest", kind="request", api_key=23, valid="0-4", flexible="4+",
    fields=[
        F("ReplicaId", "int32", "3+", default=-2, ignorable=True),
        F("Topics", "[]OffsetForLeaderTopic", fields=[
            F("Topic", "string"),
            F("Partitions", "[]OffsetForLeaderPartition", fields=[
                F("Partition", "int32"),
                F("CurrentLeaderEpoch", "int32", "2+", default=-1, ignorable=True),
                F("LeaderEpoch", "int32"),
            ]),
        ]),
    ])

OffsetForLeaderEpochResponse = message(
    "OffsetForLeaderEpochResponse", kind="response", api_key=23, valid="0-4", flexible="4+",
    fields=[
        F("ThrottleTimeMs", "int32", "2+", ignorable=True),
        F("Topics", "[]OffsetForLeaderTopicResult", fields=[
            F("Topic", "string"),
            F("Partitions", "[]EpochEndOffset", fields=[
                F("ErrorCode", "int16"),
                F("Partition", "int32"),
                F("LeaderEpoch", "int32", "1+", default=-1, ignorable=True),
                F("EndOffset", "int64", default=-1),
            ]),
        ]),
    ])

# FindCoordinator: one key up to v3, a batch of keys (CoordinatorKeys, KIP-699) from v4.
FindCoordinatorRequest = message(
    "FindCoordinatorRequest", kind="request", api_key=10, valid="0-6", flexible="3+", fields=[
        F("Key", "string", "0-3"),
        F("KeyType", "int8", "1+", default=0),
        F("CoordinatorKeys", "[]string", "4+"),
    ])

FindCoordinatorResponse = message(
    "FindCoordinatorResponse", kind="response", api_key=10, valid="0-6", flexible="3+",
    fields=[
        F("ThrottleTimeMs", "int32", "1+", ignorable=True),
        F("ErrorCode", "int16", "0-3"),
        F("ErrorMessage", "string", "1-3", nullable="1-3", ignorable=True),
        F("NodeId", "int32", "0-3"),
        F("Host", "string", "0-3"),
        F("Port", "int32", "0-3"),
        F("Coordinators", "[]Coordinator", "4+", fields=[
            F("Key", "string", "4+"),
            F("NodeId", "int32", "4+"),
            F("Host", "string", "4+"),
            F("Port", "int32", "4+"),
            F("ErrorCode", "int16", "4+"),
            F("ErrorMessage", "string", "4+", nullable="4+", ignorable=True),
        ]),
    ])

# OffsetCommit: v1 adds the generation and member id (and a per-partition commit timestamp,
# v1 only), v2-4 a retention time, v6 the leader epoch, v7 the group instance id, v8 is the
# first flexible version, v10 names topics by id. Kafka 4.0 stopped accepting v0-1.
OffsetCommitRequest = message(
    "OffsetCommitRequest", kind="request", api_key=8, valid="0-10", flexible="8+", fields=[
        F("GroupId", "string"),
        F("GenerationIdOrMemberEpoch", "int32", "1+", default=-1, ignorable=True),
        F("MemberId", "string", "1+", ignorable=True),
        F("GroupInstanceId", "string", "7+", nullable="7+", default=None),
        F("RetentionTimeMs", "int64", "2-4", default=-1, ignorable=True),
        F("Topics", "[]OffsetCommitRequestTopic", fields=[
            F("Name", "string", "0-9", ignorable=True),
            F("TopicId", "uuid", "10+", ignorable=True),
            F("Partitions", "[]OffsetCommitRequestPartition", fields=[
                F("PartitionIndex", "int32"),
                F("CommittedOffset", "int64"),
                F("CommittedLeaderEpoch", "int32", "6+", default=-1, ignorable=True),
                F("CommitTimestamp", "int64", "1", default=-1),
                F("CommittedMetadata", "string", nullable="0+"),
            ]),
        ]),
    ])

OffsetCommitResponse = message(
    "OffsetCommitResponse", kind="response", api_key=8, valid="0-10", flexible="8+", fields=[
        F("ThrottleTimeMs", "int32", "3+", ignorable=True),
        F("Topics", "[]OffsetCommitResponseTopic", fields=[
            F("Name", "string", "0-9", ignorable=True),
            F("TopicId", "uuid", "10+", ignorable=True),
            F("Partitions", "[]OffsetCommitResponsePartition", fields=[
                F("PartitionIndex", "int32"),
                F("ErrorCode", "int16"),
            ]),
        ]),
    ])

# OffsetFetch: v2 lets Topics be null (every committed offset of the group) and adds a
# top-level error, v5 the leader epoch, v6 is the first flexible version, v7 RequireStable,
# v8 asks for several groups at once (Groups), v9 adds the member id and epoch, v10 names
# topics by id. Kafka 4.0 stopped accepting v0 (offsets kept in ZooKeeper).
OffsetFetchRequest = message(
    "OffsetFetchRequest", kind="request", api_key=9, valid="0-10", flexible="6+", fields=[
        F("GroupId", "string", "0-7"),
        F("Topics", "[]OffsetFetchRequestTopic", "0-7", nullable="2-7", fields=[
            F("Name", "string", "0-7"),
            F("PartitionIndexes", "[]int32", "0-7"),
        ]),
        F("Groups", "[]OffsetFetchRequestGroup", "8+", fields=[
            F("GroupId", "string", "8+"),
            F("MemberId", "string", "9+", nullable="9+", default=None, ignorable=True),
            F("MemberEpoch", "int32", "9+", default=-1, ignorable=True),
            F("Topics", "[]OffsetFetchRequestTopics", "8+", nullable="8+", fields=[
                F("Name", "string", "8-9", ignorable=True),
                F("TopicId", "uuid", "10+", ignorable=True),
                F("PartitionIndexes", "[]int32", "8+"),
            ]),
        ]),
        F("RequireStable", "bool", "7+", default=False),
    ])

OffsetFetchResponse = message(
    "OffsetFetchResponse", kind="response", api_key=9, valid="0-10", flexible="6+", fields=[
        F("ThrottleTimeMs", "int32", "3+", ignorable=True),
        F("Topics", "[]OffsetFetchResponseTopic", "0-7", fields=[
            F("Name", "string", "0-7"),
            F("Partitions", "[]OffsetFetchResponsePartition", "0-7", fields=[
                F("PartitionIndex", "int32", "0-7"),
                F("CommittedOffset", "int64", "0-7"),
                F("CommittedLeaderEpoch", "int32", "5-7", default=-1),
                F("Metadata", "string", "0-7", nullable="0-7"),
                F("ErrorCode", "int16", "0-7"),
            ]),
        ]),
        F("ErrorCode", "int16", "2-7", default=0, ignorable=True),
        F("Groups", "[]OffsetFetchResponseGroup", "8+", fields=[
            F("GroupId", "string", "8+"),
            F("Topics", "[]OffsetFetchResponseTopics", "8+", fields=[
                F("Name", "string", "8-9", ignorable=True),
                F("TopicId", "uuid", "10+", ignorable=True),
                F("Partitions", "[]OffsetFetchResponsePartitions", "8+", fields=[
                    F("PartitionIndex", "int32", "8+"),
                    F("CommittedOffset", "int64", "8+"),
                    F("CommittedLeaderEpoch", "int32", "8+", default=-1),
                    F("Metadata", "string", "8+", nullable="8+"),
                    F("ErrorCode", "int16", "8+"),
                ]),
            ]),
            F("ErrorCode", "int16", "8+", default=0),
        ]),
    ])

# ------------------------------------------------------------------ classic consumer groups
#
# JoinGroup: v1 adds the rebalance timeout, v4 answers MEMBER_ID_REQUIRED to a new member,
# v5 adds static membership (GroupInstanceId), v6 is the first flexible version, v7 the
# protocol type in the answer, v8 a reason, v9 SkipAssignment.
JoinGroupRequest = message(
    "JoinGroupRequest", kind="request", api_key=11, valid="0-9", flexible="6+", fields=[
        F("GroupId", "string"),
        F("SessionTimeoutMs", "int32"),
        F("RebalanceTimeoutMs", "int32", "1+", default=-1, ignorable=True),
        F("MemberId", "string"),
        F("GroupInstanceId", "string", "5+", nullable="5+", default=None),
        F("ProtocolType", "string"),
        F("Protocols", "[]JoinGroupRequestProtocol", fields=[
            F("Name", "string"),
            F("Metadata", "bytes"),
        ]),
        F("Reason", "string", "8+", nullable="8+", default=None, ignorable=True),
    ])

JoinGroupResponse = message(
    "JoinGroupResponse", kind="response", api_key=11, valid="0-9", flexible="6+", fields=[
        F("ThrottleTimeMs", "int32", "2+", ignorable=True),
        F("ErrorCode", "int16"),
        F("GenerationId", "int32", default=-1),
        F("ProtocolType", "string", "7+", nullable="7+", default=None, ignorable=True),
        F("ProtocolName", "string", nullable="7+"),
        F("Leader", "string"),
        F("SkipAssignment", "bool", "9+", default=False),
        F("MemberId", "string"),
        F("Members", "[]JoinGroupResponseMember", fields=[
            F("MemberId", "string"),
            F("GroupInstanceId", "string", "5+", nullable="5+", default=None, ignorable=True),
            F("Metadata", "bytes"),
        ]),
    ])

HeartbeatRequest = message(
    "HeartbeatRequest", kind="request", api_key=12, valid="0-4", flexible="4+", fields=[
        F("GroupId", "string"),
        F("GenerationId", "int32"),
        F("MemberId", "string"),
        F("GroupInstanceId", "string", "3+", nullable="3+", default=None),
    ])

HeartbeatResponse = message(
    "HeartbeatResponse", kind="response", api_key=12, valid="0-4", flexible="4+", fields=[
        F("ThrottleTimeMs", "int32", "1+", ignorable=True),
        F("ErrorCode", "int16"),
    ])

# LeaveGroup: v3 lets several members leave at once (static members by instance id).
LeaveGroupRequest = message(
    "LeaveGroupRequest", kind="request", api_key=13, valid="0-5", flexible="4+", fields=[
        F("GroupId", "string"),
        F("MemberId", "string", "0-2"),
        F("Members", "[]MemberIdentity", "3+", fields=[
            F("MemberId", "string", "3+"),
            F("GroupInstanceId", "string", "3+", nullable="3+", default=None),
            F("Reason", "string", "5+", nullable="5+", default=None, ignorable=True),
        ]),
    ])

LeaveGroupResponse = message(
    "LeaveGroupResponse", kind="response", api_key=13, valid="0-5", flexible="4+", fields=[
        F("ThrottleTimeMs", "int32", "1+", ignorable=True),
        F("ErrorCode", "int16"),
        F("Members", "[]MemberResponse", "3+", fields=[
            F("MemberId", "string", "3+"),
            F("GroupInstanceId", "string", "3+", nullable="3+"),
            F("ErrorCode", "int16", "3+"),
        ]),
    ])

SyncGroupRequest = message(
    "SyncGroupRequest", kind="request", api_key=14, valid="0-5", flexible="4+", fields=[
        F("GroupId", "string"),
        F("GenerationId", "int32"),
        F("MemberId", "string"),
        F("GroupInstanceId", "string", "3+", nullable="3+", default=None),
        F("ProtocolType", "string", "5+", nullable="5+", default=None, ignorable=True),
        F("ProtocolName", "string", "5+", nullable="5+", default=None, ignorable=True),
        F("Assignments", "[]SyncGroupRequestAssignment", fields=[
            F("MemberId", "string"),
            F("Assignment", "bytes"),
        ]),
    ])

SyncGroupResponse = message(
    "SyncGroupResponse", kind="response", api_key=14, valid="0-5", flexible="4+", fields=[
        F("ThrottleTimeMs", "int32", "1+", ignorable=True),
        F("ErrorCode", "int16"),
        F("ProtocolType", "string", "5+", nullable="5+", default=None, ignorable=True),
        F("ProtocolName", "string", "5+", nullable="5+", default=None, ignorable=True),
        F("Assignment", "bytes"),
    ])

DescribeGroupsRequest = message(
    "DescribeGroupsRequest", kind="request", api_key=15, valid="0-6", flexible="5+", fields=[
        F("Groups", "[]string"),
        F("IncludeAuthorizedOperations", "bool", "3+"),
    ])

DescribeGroupsResponse = message(
    "DescribeGroupsResponse", kind="response", api_key=15, valid="0-6", flexible="5+", fields=[
        F("ThrottleTimeMs", "int32", "1+", ignorable=True),
        F("Groups", "[]DescribedGroup", fields=[
            F("ErrorCode", "int16"),
            F("ErrorMessage", "string", "6+", nullable="6+", default=None),
            F("GroupId", "string"),
            F("GroupState", "string"),
            F("ProtocolType", "string"),
            F("ProtocolData", "string"),
            F("Members", "[]DescribedGroupMember", fields=[
                F("MemberId", "string"),
                F("GroupInstanceId", "string", "4+", nullable="4+", default=None,
                  ignorable=True),
                F("ClientId", "string"),
                F("ClientHost", "string"),
                F("MemberMetadata", "bytes"),
                F("MemberAssignment", "bytes"),
            ]),
            F("AuthorizedOperations", "int32", "3+", default=-(1 << 31)),
        ]),
    ])

ListGroupsRequest = message(
    "ListGroupsRequest", kind="request", api_key=16, valid="0-5", flexible="3+", fields=[
        F("StatesFilter", "[]string", "4+"),
        F("TypesFilter", "[]string", "5+"),
    ])

ListGroupsResponse = message(
    "ListGroupsResponse", kind="response", api_key=16, valid="0-5", flexible="3+", fields=[
        F("ThrottleTimeMs", "int32", "1+", ignorable=True),
        F("ErrorCode", "int16"),
        F("Groups", "[]ListedGroup", fields=[
            F("GroupId", "string"),
            F("ProtocolType", "string"),
            F("GroupState", "string", "4+", ignorable=True),
            F("GroupType", "string", "5+", ignorable=True),
        ]),
    ])

DeleteGroupsRequest = message(
    "DeleteGroupsRequest", kind="request", api_key=42, valid="0-3", flexible="2+", fields=[
        F("GroupsNames", "[]string"),
    ])

DeleteGroupsResponse = message(
    "DeleteGroupsResponse", kind="response", api_key=42, valid="0-3", flexible="2+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("Results", "[]DeletableGroupResult", fields=[
            F("GroupId", "string"),
            F("ErrorCode", "int16"),
            F("ErrorMessage", "string", "3+", nullable="3+", default=None, ignorable=True),
        ]),
    ])

OffsetDeleteRequest = message(
    "OffsetDeleteRequest", kind="request", api_key=47, valid="0", flexible="none", fields=[
        F("GroupId", "string"),
        F("Topics", "[]OffsetDeleteRequestTopic", fields=[
            F("Name", "string"),
            F("Partitions", "[]OffsetDeleteRequestPartition", fields=[
                F("PartitionIndex", "int32"),
            ]),
        ]),
    ])

OffsetDeleteResponse = message(
    "OffsetDeleteResponse", kind="response", api_key=47, valid="0", flexible="none", fields=[
        F("ErrorCode", "int16"),
        F("ThrottleTimeMs", "int32", ignorable=True),
        F("Topics", "[]OffsetDeleteResponseTopic", fields=[
            F("Name", "string"),
            F("Partitions", "[]OffsetDeleteResponsePartition", fields=[
                F("PartitionIndex", "int32"),
                F("ErrorCode", "int16"),
            ]),
        ]),
    ])

# InitProducerId: v3 lets a producer bump its own epoch (ProducerId / ProducerEpoch). Kafka's
# v6 (two-phase commit, KIP-939) is still marked unstable and is not here.
InitProducerIdRequest = message(
    "InitProducerIdRequest", kind="request", api_key=22, valid="0-5", flexible="2+", fields=[
        F("TransactionalId", "string", nullable="0+"),
        F("TransactionTimeoutMs", "int32"),
        F("ProducerId", "int64", "3+", default=-1),
        F("ProducerEpoch", "int16", "3+", default=-1),
    ])

InitProducerIdResponse = message(
    "InitProducerIdResponse", kind="response", api_key=22, valid="0-5", flexible="2+", fields=[
        F("ThrottleTimeMs", "int32", ignorable=True),
        F("ErrorCode", "int16"),
        F("ProducerId", "int64", default=-1),
        F("ProducerEpoch", "int16"),
    ])

# AllocateProducerIds: a broker asks the controller for a block of producer ids.
AllocateProducerIdsRequest = message(
    "AllocateProducerIdsRequest", kind="request", api_key=67, valid="0", flexible="0+", fields=[
        F("BrokerId", "int32"),
        F("BrokerEpoch", "int64", default=-1),
    ])

AllocateProducerIdsResponse = message(
    "AllocateProducerIdsResponse", kind="response", api_key=67, valid="0", flexible="0+",
    fields=[
        F("ThrottleTimeMs", "int32"),
        F("ErrorCode", "int16"),
        F("ProducerIdStart", "int64"),
        F("ProducerIdLen", "int32"),
    ])

# Security: SASL authentication (KIP-152), ACLs (KIP-140, KIP-290 pattern types) and SCRAM
# credentials (KIP-554). SaslHandshake v0 (raw SASL tokens after the handshake, without
# SaslAuthenticate frames) is not served: the clients kraftcore is tested with send v1.
# Kafka 4 dropped the v0 of the ACL APIs; it stays here for older clients.
SaslHandshakeRequest = message(
    "SaslHandshakeRequest", kind="request", api_key=17, valid="0-1", flexible="none", fields=[
        F("Mechanism", "string"),
    ])

SaslHandshakeResponse = message(
    "SaslHandshakeResponse", kind="response", api_key=17, valid="0-1", flexible="none", fields=[
        F("ErrorCode", "int16"),
        F("Mechanisms", "[]string"),
    ])

SaslAuthenticateRequest = message(
    "SaslAuthenticateRequest", kind="request", api_key=36, valid="0-2", flexible="2+", fields=[
        F("AuthBytes", "bytes"),
    ])

SaslAuthenticateResponse = message(
    "SaslAuthenticateResponse", kind="response", api_key=36, valid="0-2", flexible="2+",
    fields=[
        F("ErrorCode", "int16"),
        F("ErrorMessage", "string", nullable="0+", default=None),
        F("AuthBytes", "bytes"),
        F("SessionLifetimeMs", "int64", "1+", default=0, ignorable=True),
    ])

DescribeAclsRequest = message(
    "DescribeAclsRequest", kind="request", api_key=29, valid="0-3", flexible="2+", fields=[
        F("ResourceTypeFilter", "int8"),
        F("ResourceNameFilter", "string", nullable="0+"),
        F("PatternTypeFilter", "int8", "1+", default=3),
        F("PrincipalFilter", "string", nullable="0+"),
        F("HostFilter", "string", nullable="0+"),
        F("Operation", "int8"),
        F("PermissionType", "int8"),
    ])

DescribeAclsResponse = message(
    "DescribeAclsResponse", kind="response", api_key=29, valid="0-3", flexible="2+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("ErrorCode", "int16"),
        F("ErrorMessage", "string", nullable="0+", default=None),
        F("Resources", "[]DescribeAclsResource", fields=[
            F("ResourceType", "int8"),
            F("ResourceName", "string"),
            F("PatternType", "int8", "1+", default=3),
            F("Acls", "[]AclDescription", fields=[
                F("Principal", "string"),
                F("Host", "string"),
                F("Operation", "int8"),
                F("PermissionType", "int8"),
            ]),
        ]),
    ])

CreateAclsRequest = message(
    "CreateAclsRequest", kind="request", api_key=30, valid="0-3", flexible="2+", fields=[
        F("Creations", "[]AclCreation", fields=[
            F("ResourceType", "int8"),
            F("ResourceName", "string"),
            F("ResourcePatternType", "int8", "1+", default=3),
            F("Principal", "string"),
            F("Host", "string"),
            F("Operation", "int8"),
            F("PermissionType", "int8"),
        ]),
    ])

CreateAclsResponse = message(
    "CreateAclsResponse", kind="response", api_key=30, valid="0-3", flexible="2+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("Results", "[]AclCreationResult", fields=[
            F("ErrorCode", "int16"),
            F("ErrorMessage", "string", nullable="0+", default=None),
        ]),
    ])

DeleteAclsRequest = message(
    "DeleteAclsRequest", kind="request", api_key=31, valid="0-3", flexible="2+", fields=[
        F("Filters", "[]DeleteAclsFilter", fields=[
            F("ResourceTypeFilter", "int8"),
            F("ResourceNameFilter", "string", nullable="0+"),
            F("PatternTypeFilter", "int8", "1+", default=3),
            F("PrincipalFilter", "string", nullable="0+"),
            F("HostFilter", "string", nullable="0+"),
            F("Operation", "int8"),
            F("PermissionType", "int8"),
        ]),
    ])

DeleteAclsResponse = message(
    "DeleteAclsResponse", kind="response", api_key=31, valid="0-3", flexible="2+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("FilterResults", "[]DeleteAclsFilterResult", fields=[
            F("ErrorCode", "int16"),
            F("ErrorMessage", "string", nullable="0+", default=None),
            F("MatchingAcls", "[]DeleteAclsMatchingAcl", fields=[
                F("ErrorCode", "int16"),
                F("ErrorMessage", "string", nullable="0+", default=None),
                F("ResourceType", "int8"),
                F("ResourceName", "string"),
                F("PatternType", "int8", "1+", default=3),
                F("Principal", "string"),
                F("Host", "string"),
                F("Operation", "int8"),
                F("PermissionType", "int8"),
            ]),
        ]),
    ])

DescribeUserScramCredentialsRequest = message(
    "DescribeUserScramCredentialsRequest", kind="request", api_key=50, valid="0",
    flexible="0+", fields=[
        F("Users", "[]UserName", nullable="0+", fields=[
            F("Name", "string"),
        ]),
    ])

DescribeUserScramCredentialsResponse = message(
    "DescribeUserScramCredentialsResponse", kind="response", api_key=50, valid="0",
    flexible="0+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("ErrorCode", "int16"),
        F("ErrorMessage", "string", nullable="0+", default=None),
        F("Results", "[]DescribeUserScramCredentialsResult", fields=[
            F("User", "string"),
            F("ErrorCode", "int16"),
            F("ErrorMessage", "string", nullable="0+", default=None),
            F("CredentialInfos", "[]CredentialInfo", fields=[
                F("Mechanism", "int8"),
                F("Iterations", "int32"),
            ]),
        ]),
    ])

AlterUserScramCredentialsRequest = message(
    "AlterUserScramCredentialsRequest", kind="request", api_key=51, valid="0", flexible="0+",
    fields=[
        F("Deletions", "[]ScramCredentialDeletion", fields=[
            F("Name", "string"),
            F("Mechanism", "int8"),
        ]),
        F("Upsertions", "[]ScramCredentialUpsertion", fields=[
            F("Name", "string"),
            F("Mechanism", "int8"),
            F("Iterations", "int32"),
            F("Salt", "bytes"),
            F("SaltedPassword", "bytes"),
        ]),
    ])

AlterUserScramCredentialsResponse = message(
    "AlterUserScramCredentialsResponse", kind="response", api_key=51, valid="0",
    flexible="0+", fields=[
        F("ThrottleTimeMs", "int32"),
        F("Results", "[]AlterUserScramCredentialsResult", fields=[
            F("User", "string"),
            F("ErrorCode", "int16"),
            F("ErrorMessage", "string", nullable="0+", default=None),
        ]),
    ])

REQUESTS = (
    ApiVersionsRequest, FetchRequest, MetadataRequest, CreateTopicsRequest, DeleteTopicsRequest,
    CreatePartitionsRequest, ElectLeadersRequest, IncrementalAlterConfigsRequest,
    DescribeConfigsRequest, VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest,
    DescribeQuorumRequest, AlterPartitionRequest, FetchSnapshotRequest, DescribeClusterRequest,
    BrokerRegistrationRequest, BrokerHeartbeatRequest, UnregisterBrokerRequest,
    ControllerRegistrationRequest, AddRaftVoterRequest, RemoveRaftVoterRequest,
    UpdateRaftVoterRequest, ProduceRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest,
    FindCoordinatorRequest, InitProducerIdRequest, AllocateProducerIdsRequest,
    OffsetCommitRequest, OffsetFetchRequest, JoinGroupRequest, HeartbeatRequest,
    LeaveGroupRequest, SyncGroupRequest, DescribeGroupsRequest, ListGroupsRequest,
    DeleteGroupsRequest, OffsetDeleteRequest, SaslHandshakeRequest, SaslAuthenticateRequest,
    DescribeAclsRequest, CreateAclsRequest, DeleteAclsRequest,
    DescribeUserScramCredentialsRequest, AlterUserScramCredentialsRequest,
)
RESPONSES = (
    ApiVersionsResponse, FetchResponse, MetadataResponse, CreateTopicsResponse,
    DeleteTopicsResponse, CreatePartitionsResponse, ElectLeadersResponse,
    IncrementalAlterConfigsResponse, DescribeConfigsResponse, VoteResponse,
    BeginQuorumEpochResponse, EndQuorumEpochResponse, DescribeQuorumResponse,
    AlterPartitionResponse, FetchSnapshotResponse, DescribeClusterResponse,
    BrokerRegistrationResponse, BrokerHeartbeatResponse, UnregisterBrokerResponse,
    ControllerRegistrationResponse, AddRaftVoterResponse, RemoveRaftVoterResponse,
    UpdateRaftVoterResponse, ProduceResponse, ListOffsetsResponse, OffsetForLeaderEpochResponse,
    FindCoordinatorResponse, InitProducerIdResponse, AllocateProducerIdsResponse,
    OffsetCommitResponse, OffsetFetchResponse, JoinGroupResponse, HeartbeatResponse,
    LeaveGroupResponse, SyncGroupResponse, DescribeGroupsResponse, ListGroupsResponse,
    DeleteGroupsResponse, OffsetDeleteResponse, SaslHandshakeResponse,
    SaslAuthenticateResponse, DescribeAclsResponse, CreateAclsResponse, DeleteAclsResponse,
    DescribeUserScramCredentialsResponse, AlterUserScramCredentialsResponse,
)

__all__ = [cls.__name__ for cls in REQUESTS + RESPONSES] + ["REQUESTS", "RESPONSES",
                                                             "BROKER_EPOCH_TAG"]

for _cls in REQUESTS + RESPONSES:  # built by schema.message(); they live here
    adopt(_cls, __name__)
del _cls
