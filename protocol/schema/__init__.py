"""kio-compatible entities for the Kafka 4.4 versions kio 0.6.5 has no schema for.

Each module is written as kio's generator writes its own (kio/schema/<api>/v<N>/), field for field
from Kafka 4.4's message specs (common/message/*.json in kafka-clients-4.4.0.jar), so kio's
readers and writers serialize them like any of kio's entities. ``index.SCHEMAS`` lists them;
protocol/api_keys.py loads them where kio has none. They go once kio ships these versions.
"""
