"""Prometheus metrics of a node (``metrics.listener``), named as the Prometheus JMX exporter names
Kafka's MBeans so that Kafka dashboards read them unchanged; docs/metrics.md lists them.

The hot paths only add to plain counters on objects they resolved once (a topic's
``TopicMetrics``, an API's ``RequestMetrics``); everything else is read from the node's state
when Prometheus scrapes, by the collectors of this package, on the event loop.

- ``histogram``: Kafka's Histogram (count, sum, max, a reservoir for the quantiles), as a Prometheus summary.
- ``broker_topic_metrics``: kafka.server BrokerTopicMetrics, per topic and in total.
- ``request_metrics``: kafka.network RequestMetrics, per API, from each request's timestamps and size.
- ``request_errors``: RequestMetrics' ErrorsPerSec, the error codes of each answer as Kafka's ``errorCounts()``.
- ``socket_server_metrics``: socket-server-metrics per listener (connections, bytes, requests), and bytes sent by sendfile or copied.
- ``selector_stats``: the counters and windowed rates behind them, kept by each listener's connections.
- ``replica_manager_metrics``: kafka.server ReplicaManager.
- ``delayed_operation_metrics``: kafka.server DelayedOperationPurgatory (Produce, Fetch).
- ``fetch_session_metrics``: kafka.server FetchSessionCache (KIP-227's incremental fetch sessions).
- ``controller_metrics``: kafka.controller KafkaController.
- ``raft_metrics``: kafka.server raft-metrics.
- ``log_metrics``: kafka.log LogFlushStats, LogCleaner, LogCleanerManager.
- ``consumer_group_lag``: kafka_consumergroup_* (as kafka-exporter names them), on the group coordinator.
- ``client_telemetry_metrics``: the clients' KIP-714 pushes as kafka_client_* gauges.
- ``kafka_metrics_exporter``: the registry of a node and its HTTP endpoint.
"""
