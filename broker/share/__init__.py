"""Share groups (KIP-932): the share partition core, sans-IO.

``SharePartition`` (Kafka's ``kafka.server.share.SharePartition``) tracks which records of one
topic partition a share group has in flight, who holds them and how often they were
delivered. It takes the time and the fetched offset ranges as arguments and returns what the
ShareFetch/ShareAcknowledge handlers answer and what the share coordinator must persist.
"""
