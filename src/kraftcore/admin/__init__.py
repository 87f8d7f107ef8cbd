"""Clients of a running cluster: `client` holds `AdminClient`, the Kafka admin client for a
KRaft controller quorum that the `kraftcore quorum | topics | brokers | configs` commands,
the tests and the demo use; `groups` holds `GroupAdmin`, which talks to brokers about
consumer groups for `kraftcore groups`; `watch` follows the metadata log
(docs/admin.md)."""
