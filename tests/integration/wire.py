"""A minimal Kafka wire client for tests: one kio request entity out, its response entity back."""

from __future__ import annotations

from broker.wire_client import TIMEOUT_S, exchange, request

__all__ = ["TIMEOUT_S", "exchange", "request"]
