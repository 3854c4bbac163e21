"""Storage errors, each carrying the Kafka error code the broker answers with."""


class StorageError(Exception):
    error_code: int = -1


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
    error_code = 87
