"""Storage errors, each carrying the Kafka error code the broker answers with."""


class StorageError(Exception):
    error_code: int = -1  # UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(StorageError):
    error_code = 1


class CorruptRecordError(StorageError):
    error_code = 2


class RecordTooLargeError(StorageError):
    error_code = 10


class RecordBatchTooLargeError(StorageError):
    error_code = 18


class InvalidTimestampError(StorageError):
    error_code = 32


class UnsupportedForMessageFormatError(StorageError):
    error_code = 43


class KafkaStorageError(StorageError):
    error_code = 56


class InvalidRecordError(StorageError):
    """INVALID_RECORD; ``record_errors`` names the rejected records, (index in the batch, message)."""

    error_code = 87

    def __init__(self, message: str, record_errors: tuple[tuple[int, str | None], ...] = ()) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class InconsistentTopicIdError(StorageError):
    """The partition folder belongs to another topic of the same name."""

    error_code = 103


class UnexpectedAppendOffsetError(StorageError):
    """A follower append starts below the log end; the fetcher must truncate before retrying.

    Kafka keeps this internal (UNKNOWN_SERVER_ERROR if it ever reaches a client).
    """

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class OffsetsOutOfOrderError(StorageError):
    """Batches handed to a follower append are not in increasing offset order (internal in Kafka)."""
