"""The deterministic simulator of a KRaft quorum."""
