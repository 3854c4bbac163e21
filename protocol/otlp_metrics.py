"""OpenTelemetry's MetricsData protobuf (what KIP-714 clients push), read as far as metric names,
values and attributes: a small wire-format reader instead of the protobuf runtime for one message."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable

@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One data point of a pushed metric. ``kind``: gauge, sum, histogram or summary; a histogram's
    or summary's ``value`` is its sum, with ``count`` beside it."""

    name: str
    kind: str
    value: float
    attributes: tuple[tuple[str, str], ...] = ()
    time_unix_nano: int = 0
    count: int | None = None
    monotonic: bool = False


class ProtobufError(ValueError):
    pass


def _fields(data: bytes | memoryview) -> Iterable[tuple[int, int, object]]:
    """(field number, wire type, value) of each field of one protobuf message: an int for varint
    and fixed fields, a memoryview for length-delimited ones."""
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        key, pos = _varint(view, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(view, pos)
        elif wire == 1:
            if pos + 8 > end:
                raise ProtobufError("truncated fixed64")
            value, pos = int.from_bytes(view[pos : pos + 8], "little"), pos + 8
        elif wire == 2:
            size, pos = _varint(view, pos)
            if pos + size > end:
                raise ProtobufError("truncated length-delimited field")
            value, pos = view[pos : pos + size], pos + size
        elif wire == 5:
            if pos + 4 > end:
                raise ProtobufError("truncated fixed32")
            value, pos = int.from_bytes(view[pos : pos + 4], "little"), pos + 4
        else:
            raise ProtobufError(f"wire type {wire}")
        if number == 0:
            raise ProtobufError("field number 0")
        yield number, wire, value


def _varint(view: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(view) or shift > 63:
            raise ProtobufError("bad varint")
        byte = view[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _double(bits: int) -> float:
    return float(struct.unpack("<d", bits.to_bytes(8, "little"))[0])


def _signed64(v: int) -> int:
    return v - 2**64 if v >= 2**63 else v


def _text(value: object) -> str:
    assert isinstance(value, memoryview)
    return bytes(value).decode("utf-8", "replace")


def _any_value(data: memoryview) -> str:
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            return _text(value)
        if number == 2 and wire == 0:
            return "true" if value else "false"
        if number == 3 and wire == 0:
            return str(_signed64(int(value)))  # type: ignore[call-overload]
        if number == 4 and wire == 1:
            return repr(_double(int(value)))  # type: ignore[call-overload]
        if wire == 2:
            return bytes(value).hex()  # type: ignore[arg-type]  # arrays, key-value lists, bytes
    return ""


def _attributes(items: list[memoryview]) -> tuple[tuple[str, str], ...]:
    out = []
    for kv in items:
        key, value = "", ""
        for number, wire, v in _fields(kv):
            if number == 1 and wire == 2:
                key = _text(v)
            elif number == 2 and wire == 2:
                value = _any_value(v)  # type: ignore[arg-type]
        out.append((key, value))
    return tuple(out)


def _points(name: str, kind: str, data: memoryview) -> list[MetricPoint]:
    """The data points of a Gauge, Sum, Histogram or Summary message."""
    points: list[MetricPoint] = []
    raw_points: list[memoryview] = []
    monotonic = False
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            raw_points.append(value)  # type: ignore[arg-type]
        elif number == 3 and wire == 0 and kind == "sum":
            monotonic = bool(value)
    attributes_field = {"gauge": 7, "sum": 7, "histogram": 9, "summary": 7}[kind]
    for raw in raw_points:
        attrs: list[memoryview] = []
        time_ns, number_value, count = 0, 0.0, None
        for number, wire, value in _fields(raw):
            if number == attributes_field and wire == 2:
                attrs.append(value)  # type: ignore[arg-type]
            elif number == 3 and wire == 1:
                time_ns = int(value)  # type: ignore[call-overload]
            elif kind in ("gauge", "sum"):
                if number == 4 and wire == 1:
                    number_value = _double(int(value))  # type: ignore[call-overload]
                elif number == 6 and wire == 1:
                    number_value = float(_signed64(int(value)))  # type: ignore[call-overload]
            elif number == 4 and wire == 1:
                count = int(value)  # type: ignore[call-overload]
            elif number == 5 and wire == 1:
                number_value = _double(int(value))  # type: ignore[call-overload]
        points.append(MetricPoint(name, kind, number_value, _attributes(attrs), time_ns, count, monotonic))
    return points


_METRIC_DATA = {5: "gauge", 7: "sum", 9: "histogram", 11: "summary"}


def decode_metrics_data(data: bytes | memoryview) -> tuple[tuple[tuple[str, str], ...], list[MetricPoint]]:
    """An OTLP MetricsData message: the resource attributes (of every ResourceMetrics) and the data
    points of its gauges, sums, histograms and summaries. ProtobufError when it is not one."""
    resource_attrs: list[memoryview] = []
    points: list[MetricPoint] = []
    for number, wire, resource_metrics in _fields(data):
        if number != 1 or wire != 2:
            continue
        for n2, w2, value in _fields(resource_metrics):  # type: ignore[arg-type]
            if n2 == 1 and w2 == 2:  # Resource
                resource_attrs.extend(v for n3, w3, v in _fields(value) if n3 == 1 and w3 == 2)  # type: ignore[arg-type, misc]
            elif n2 == 2 and w2 == 2:  # ScopeMetrics
                for n3, w3, metric in _fields(value):  # type: ignore[arg-type]
                    if n3 == 2 and w3 == 2:
                        points.extend(_metric(metric))  # type: ignore[arg-type]
    return _attributes(resource_attrs), points


def _metric(data: memoryview) -> list[MetricPoint]:
    name = ""
    bodies: list[tuple[str, memoryview]] = []
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            name = _text(value)
        elif number in _METRIC_DATA and wire == 2:
            bodies.append((_METRIC_DATA[number], value))  # type: ignore[arg-type]
    return [p for kind, body in bodies for p in _points(name, kind, body)]


__all__ = ["MetricPoint", "ProtobufError", "decode_metrics_data"]
