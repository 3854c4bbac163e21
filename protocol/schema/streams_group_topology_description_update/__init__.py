"""Entities of Kafka 4.4 versions kio 0.6.5 lacks; see protocol/schema/__init__.py."""
