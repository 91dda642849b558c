"""A compact binary form for a GPU's (or a node's) down-sampled series (the job archive).

Layout (big-endian): ``version:u8 n:u16`` then per channel ``id:u8`` and ``n`` values.
Each channel has a kind:

- ``ratio`` (one byte): 0..250 -> 0..1, 255 = no sample (utilisation, activity, tensor);
- ``u8`` (one byte): whole units, 255 = none (temperature in °C);
- ``u16`` (two bytes): units of ``unit``, 65535 = none (memory in 4 MiB, power in W, clock
  in MHz, a throttle-reasons bitmask, an XID code);
- ``log`` (two bytes): ``round(1000 * log2(1 + x))``, 65535 = none: byte rates from a few
  B/s to many TB/s (NVLink, PCIe, InfiniBand, Ethernet) within 0.07 %.

The whole blob is zlib-compressed when that is smaller (version 2). About 2 KB for 300
points of the five efficiency channels; the health and traffic channels add about as much
again (they compress well: throttle reasons and XIDs are mostly constant).
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Mapping, Sequence

RATIO_STEPS = 250
MISSING_U8 = 255
MISSING_U16 = 65535
LOG_SCALE = 1000.0
# channel -> (id, kind, unit of a stored step for u8/u16 channels). Ids are stored in
# blobs: never renumber one, only add new ones.
CHANNELS: dict[str, tuple[int, str, float]] = {
    "gpu_util": (1, "ratio", 1.0), "activity": (2, "ratio", 1.0),
    "tensor_active": (3, "ratio", 1.0), "fb_used": (4, "u16", 4.0), "power": (5, "u16", 1.0),
    # GPU health and traffic (job page charts, straggler evidence)
    "occupancy": (6, "ratio", 1.0), "temperature": (7, "u8", 1.0),
    "sm_clock": (8, "u16", 1.0), "throttle": (9, "u16", 1.0), "xid": (10, "u16", 1.0),
    "nvlink": (11, "log", 1.0), "pcie_rx": (12, "log", 1.0), "pcie_tx": (13, "log", 1.0),
    "dram_active": (14, "ratio", 1.0), "fp64_active": (15, "ratio", 1.0),
    # node series (node-shared: every job on the node sees the same values)
    "ib_tx": (20, "log", 1.0), "ib_rx": (21, "log", 1.0), "ib_wait": (22, "log", 1.0),
    "net_tx": (23, "log", 1.0), "net_rx": (24, "log", 1.0),
    "cpu_busy": (25, "ratio", 1.0), "mem_used": (26, "u16", float(2**30)),  # memory in GiB
    "fs_read": (27, "log", 1.0), "fs_write": (28, "log", 1.0), "cpu_iowait": (29, "ratio", 1.0),
}
_WIDTH = {"ratio": 1, "u8": 1, "u16": 2, "log": 2}
_BY_ID = {cid: (name, kind, unit) for name, (cid, kind, unit) in CHANNELS.items()}
RAW, ZLIB = 1, 2


class CompactError(ValueError):
    """The blob is not a compact series this code can read."""


def encode(channels: Mapping[str, Sequence[float | None]]) -> bytes:
    """Pack equal-length channels (unknown names are an error, None means no sample)."""
    lengths = {len(values) for values in channels.values()}
    if len(lengths) > 1:
        raise CompactError("all channels need the same number of points")
    n = lengths.pop() if lengths else 0
    body = bytearray(struct.pack(">H", n))
    for name, values in channels.items():
        if name not in CHANNELS:
            raise CompactError(f"unknown channel {name!r}")
        cid, kind, unit = CHANNELS[name]
        body.append(cid)
        body += _pack(kind, unit, values)
    packed = zlib.compress(bytes(body), 6)
    return bytes([ZLIB]) + packed if len(packed) < len(body) else bytes([RAW]) + bytes(body)


def decode(blob: bytes) -> dict[str, list[float | None]]:
    """The channels back, values rounded to the stored resolution."""
    if not blob:
        return {}
    version, body = blob[0], blob[1:]
    if version == ZLIB:
        body = zlib.decompress(body)
    elif version != RAW:
        raise CompactError(f"unknown compact series version {version}")
    (n,), pos = struct.unpack_from(">H", body), 2
    channels: dict[str, list[float | None]] = {}
    while pos < len(body):
        if body[pos] not in _BY_ID:
            raise CompactError(f"unknown channel id {body[pos]}")
        name, kind, unit = _BY_ID[body[pos]]
        pos += 1
        channels[name] = _unpack(kind, unit, body, pos, n)
        pos += n * _WIDTH[kind]
    return channels


def _pack(kind: str, unit: float, values: Sequence[float | None]) -> bytes:
    if kind == "ratio":
        return bytes(_ratio(v) for v in values)
    if kind == "u8":
        return bytes(_u8(v, unit) for v in values)
    encode_one = _log if kind == "log" else _u16
    return b"".join(struct.pack(">H", encode_one(v, unit)) for v in values)


def _unpack(kind: str, unit: float, body: bytes, pos: int, n: int) -> list[float | None]:
    if kind == "ratio":
        return [None if b == MISSING_U8 else b / RATIO_STEPS for b in body[pos:pos + n]]
    if kind == "u8":
        return [None if b == MISSING_U8 else b * unit for b in body[pos:pos + n]]
    raw = struct.unpack_from(f">{n}H", body, pos)
    if kind == "log":
        return [None if v == MISSING_U16 else 2 ** (v / LOG_SCALE) - 1 for v in raw]
    return [None if v == MISSING_U16 else v * unit for v in raw]


def _missing(value: float | None) -> bool:
    return value is None or value != value


def _ratio(value: float | None) -> int:
    if value is None or _missing(value):
        return MISSING_U8
    return round(min(1.0, max(0.0, value)) * RATIO_STEPS)


def _u8(value: float | None, unit: float) -> int:
    if value is None or _missing(value):
        return MISSING_U8
    return round(min(MISSING_U8 - 1.0, max(0.0, value / unit)))


def _u16(value: float | None, unit: float) -> int:
    if value is None or _missing(value):
        return MISSING_U16
    return round(min(MISSING_U16 - 1.0, max(0.0, value / unit)))


def _log(value: float | None, unit: float) -> int:
    if value is None or _missing(value) or math.isinf(value):
        return MISSING_U16
    return round(min(MISSING_U16 - 1.0, LOG_SCALE * math.log2(1 + max(0.0, value / unit))))
