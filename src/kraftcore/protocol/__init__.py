"""Kafka's wire protocol: field types, schemas, headers, framing and messages."""
