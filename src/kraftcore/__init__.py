"""kraftcore: Kafka's KRaft metadata quorum and a Kafka-compatible durable log.

The hot paths (CRC-32C, varints, record batches) are native kernels chosen by
`kraftcore.codec`; everything they do is also written in pure Python in `kraftcore._py`.
"""

__version__ = "0.1.0"
