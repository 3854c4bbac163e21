"""What the hand-written request readers' property tests share: kio encoding and damaged bodies."""

from __future__ import annotations

import io

from hypothesis import strategies as st
from kio.serial import entity_writer

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)


def encode(entity: object) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)  # type: ignore[arg-type]
    return out.getvalue()


def damaged(body: bytes, data: st.DataObject) -> bytearray:
    """``body`` with maybe one byte set to a boundary value, cut at a drawn length."""
    out = bytearray(body)
    if out and data.draw(st.booleans()):
        position = data.draw(st.integers(0, len(out) - 1))
        out[position] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
    return out[: data.draw(st.integers(0, len(out)))]
