"""Native batched Bloom probes (polecat/dedup/_bloom.c)."""

from collections.abc import Sequence

from bitarray import bitarray

Layer = tuple[bitarray, int, int]

def hash_pair(key: bytes, /) -> tuple[int, int]:
    """``mmh3.mmh3_x64_128_utupledigest(key, 0)``."""

def probe(keys: Sequence[bytes], layers: Sequence[Layer], /) -> tuple[list[bool], bytes]:
    """Which keys the layers hold (or the batch repeats), and every key's 16-byte (h1, h2 | 1) pair."""

def set_bits(layer: Layer, pairs: bytes, indices: Sequence[int], /) -> None:
    """Set the probes of the keys at ``indices`` in ``layer``."""
