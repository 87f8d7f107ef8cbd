"""The active controller: brokers, topics, partitions, leader election and replica
placement, all driven by replaying committed metadata records (kafka-facts §8)."""
