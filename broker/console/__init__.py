"""`kbroker console`: a live web page over a running cluster.

A separate process and a client of the cluster, never part of a broker: it speaks Kafka's
protocol to the brokers through the repository's own asyncio NetworkClient and kio entities
(collector.py), keeps the latest picture of the cluster and a short lag history in memory, and
serves it as JSON and as a plain HTML+JS page (server.py, static/) from the standard library's
asyncio, on one event loop.
"""
