"""The share coordinator (KIP-932), sans-IO: the durable state of every share partition
(group, topic id, partition) in the internal topic ``__share_group_state``.

Kafka's ``share-coordinator`` module: ``ShareCoordinatorShard`` (``share_coordinator_shard``),
its records (``records``), ``PersisterStateBatchCombiner`` (``state_batch_combiner``),
``ShareGroupOffset`` (``share_group_offset``), ``ShareCoordinatorOffsetsManager``
(``offsets_manager``), ``ShareCoordinatorConfig`` (``config``) and the server's
``SharePartitionKey`` (``share_partition_key``).
"""
