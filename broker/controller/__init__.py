"""The active controller and its decisions: topics, partitions, configs, brokers, producer ids."""
