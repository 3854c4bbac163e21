"""Cluster metadata on a node: the records, the image they build, and how committed batches reach it."""
