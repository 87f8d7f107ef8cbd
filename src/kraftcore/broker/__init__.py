"""The broker side of KRaft: its lifecycle with the active controller (registration,
heartbeats, lease, controlled shutdown; `lifecycle`) and its metadata follower and
publisher (`metadata`), both sans-I/O (kafka-facts §8.2, §8.3, §4.6)."""

from kraftcore.broker.lifecycle import (FENCED, OFFLINE, ONLINE, STOPPING, BrokerLifecycle,
                                        BrokerState, HeartbeatRequest, RegisterRequest,
                                        Transition, submit_request)
from kraftcore.broker.metadata import BrokerMetadata, MetadataUpdate, visible_brokers

__all__ = ["BrokerLifecycle", "BrokerState", "RegisterRequest", "HeartbeatRequest",
           "Transition", "submit_request", "OFFLINE", "FENCED", "ONLINE", "STOPPING",
           "BrokerMetadata", "MetadataUpdate", "visible_brokers"]
