"""The coordinator runtime shared by the group and transaction coordinators (Kafka's coordinator-common)."""
