"""Errors a caller of kraftcore can meet. Each message says what is wrong and what to do."""


class KraftcoreError(Exception):
    """Base class of every error kraftcore raises on purpose."""


class CorruptRecordError(KraftcoreError, ValueError):
    """Bytes that should hold record batches do not: bad CRC, impossible field, truncation.

    `position` is the byte offset, in the buffer that was given, where the problem was found
    (for a compressed batch, the position of that batch).
    """

    def __init__(self, message, position=None):
        self.position = position
        self.reason = message
        if position is not None:
            message = f"{message} (at byte {position})"
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.reason, self.position))


class UnsupportedCompressionError(KraftcoreError):
    """A record batch uses a compression codec kraftcore does not implement (only lz4 is)."""

    def __init__(self, codec, position=None):
        self.codec = codec
        self.position = position
        where = "" if position is None else f" (batch at byte {position})"
        super().__init__(
            f"compression codec {codec!r} is not supported{where}; "
            "kraftcore reads and writes uncompressed and lz4 batches only"
        )

    def __reduce__(self):
        return (type(self), (self.codec, self.position))
