"""ScalableBloom: no false negatives, false-positive rate near target, bounded growth, persistence."""

from __future__ import annotations

import importlib.util
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.dedup import bloom as bloom_module
from polecat.dedup.bloom import ScalableBloom
from polecat.errors import CorruptBloom
from tests.native_helpers import kernel


def _keys(n: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    return [rnd.randbytes(16) for _ in range(n)]


def _fp_rate(bloom: ScalableBloom, probes: list[bytes]) -> float:
    return sum(key in bloom for key in probes) / len(probes)


def test_add_reports_presence_and_never_forgets() -> None:
    bloom = ScalableBloom(1_000, 0.01)
    keys = _keys(500, 1)
    assert [bloom.add(k) for k in keys].count(True) <= 5  # a few false positives at most
    assert all(bloom.add(k) for k in keys)
    assert all(k in bloom for k in keys)
    assert len(bloom) >= 495


def test_add_many_sets_the_same_bits_as_add(tmp_path: Path) -> None:
    # At 1e-9 no key of this set is a false positive, so both paths insert every key, layer by layer.
    keys = _keys(5_000, 2)
    single, batched = ScalableBloom(2_000, 1e-9), ScalableBloom(2_000, 1e-9)
    assert [single.add(k) for k in keys] == [False] * 5_000
    assert batched.add_many(keys[:1_500]) + batched.add_many(keys[1_500:]) == [False] * 5_000
    assert single.layers == batched.layers == 2
    single.save(tmp_path / "single", tag=0)
    batched.save(tmp_path / "batched", tag=0)
    assert (tmp_path / "single").read_bytes() == (tmp_path / "batched").read_bytes()
    assert batched.add_many(keys) == [True] * 5_000


def test_add_many_flags_repeats_within_a_batch() -> None:
    bloom = ScalableBloom(100, 0.01)
    a, b = _keys(2, 3)
    assert bloom.add_many([a, b, a, a]) == [False, False, True, True]
    assert bloom.add_many([]) == []
    assert len(bloom) == 2


@pytest.mark.parametrize("fp_rate", [0.01, 0.001])
def test_false_positive_rate_within_20_percent_of_target(fp_rate: float) -> None:
    n = 200_000
    bloom = ScalableBloom(n, fp_rate)
    bloom.add_many(_keys(n, 4))
    assert bloom.layers == 1
    # Optimal sizing: -ln p / ln^2 2 bits per key (9.6 at 1 %), rounded up to a 64-bit word.
    assert bloom.memory_bytes * 8 / n == pytest.approx(-math.log(fp_rate) / math.log(2) ** 2, rel=0.001)
    observed = _fp_rate(bloom, _keys(200_000 if fp_rate < 0.01 else 100_000, 5))
    assert abs(observed - fp_rate) <= 0.2 * fp_rate


def test_growth_keeps_the_false_positive_rate_bounded() -> None:
    capacity, fp_rate = 10_000, 0.01
    bloom = ScalableBloom(capacity, fp_rate)
    keys = _keys(capacity * 10, 6)
    bloom.add_many(keys)
    assert bloom.layers == 4  # 10k + 20k + 40k + 80k >= 100k
    assert all(bloom.add_many(keys))
    rate = _fp_rate(bloom, _keys(50_000, 7))
    # Layers at p, .85p, .72p and a part-filled .61p: about 2.6 p, well under p / (1 - 0.85).
    assert rate < 3.2 * fp_rate
    # A fixed filter of the same size would be saturated by 10 x its keys.
    assert bloom.memory_bytes < capacity * 15 * 1.25 * 2


def test_rejects_bad_parameters() -> None:
    for args in [(0, 0.01), (10, 0.0), (10, 1.0)]:
        with pytest.raises(ValueError, match="Bloom"):
            ScalableBloom(*args)


def test_save_load_round_trip(tmp_path: Path) -> None:
    bloom = ScalableBloom(1_000, 0.01)
    keys = _keys(3_000, 8)
    bloom.add_many(keys)
    path = tmp_path / "seen.bloom"
    bloom.save(path, tag=77)
    loaded, tag = ScalableBloom.load(path)
    assert tag == 77
    assert (len(loaded), loaded.layers, loaded.memory_bytes) == (len(bloom), bloom.layers, bloom.memory_bytes)
    assert all(k in loaded for k in keys)
    probes = _keys(5_000, 9)
    assert [k in loaded for k in probes] == [k in bloom for k in probes]
    assert not os.path.exists(str(path) + ".tmp")
    # The loaded filter keeps growing like the original.
    more = _keys(10_000, 10)
    assert loaded.add_many(more) == bloom.add_many(more)
    assert loaded.layers == bloom.layers


def test_load_rejects_damaged_files(tmp_path: Path) -> None:
    bloom = ScalableBloom(1_000, 0.01)
    bloom.add_many(_keys(100, 11))
    path = tmp_path / "seen.bloom"
    bloom.save(path, tag=1)
    data = path.read_bytes()
    (tmp_path / "short").write_bytes(data[:-20])
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 1
    (tmp_path / "flipped").write_bytes(bytes(flipped))
    (tmp_path / "other").write_bytes(b"x" * len(data))
    for name in ["short", "flipped", "other"]:
        with pytest.raises(CorruptBloom):
            ScalableBloom.load(tmp_path / name)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 300), max_size=150), min_size=1, max_size=6),
       st.integers(1, 40))
def test_every_path_takes_the_batched_semantics(batches: list[list[int]], capacity: int) -> None:
    # The same keys through each path, a small capacity so that layers grow inside batches.
    paths = ["_add_few", "_add_vectorized"] + (["_add_native"] if bloom_module._kernel is not None else [])
    blooms = {path: ScalableBloom(capacity, 0.05) for path in paths}
    for batch in batches:
        keys = [b"k%d" % i for i in batch]
        answers = {path: getattr(b, path)(keys) for path, b in blooms.items()}
        assert all(a == answers["_add_few"] for a in answers.values()), answers
        layers = {path: [(layer.count, layer.bits) for layer in b._layers] for path, b in blooms.items()}
        assert all(v == layers["_add_few"] for v in layers.values())


@settings(max_examples=300)
@given(st.binary(max_size=100))
def test_the_kernel_hashes_as_mmh3(key: bytes) -> None:
    native_bloom = kernel("polecat.dedup._bloom")
    assert native_bloom.hash_pair(key) == mmh3.mmh3_x64_128_utupledigest(key, 0)


def test_the_kernel_refuses_what_it_cannot_read() -> None:
    native_bloom = kernel("polecat.dedup._bloom")
    bloom = ScalableBloom(100, 0.01)
    layer = bloom._layers[0]
    with pytest.raises(TypeError):
        native_bloom.probe(["text"], [(layer.bits, layer.m, layer.k)])
    with pytest.raises(ValueError):
        native_bloom.probe([b"k"], [(layer.bits, layer.m + 64, layer.k)])  # more bits than the buffer
    with pytest.raises(IndexError):
        native_bloom.set_bits((layer.bits, layer.m, layer.k), bytes(16), [1])
    # Keys the kernel does not take (other bytes-like objects) go through the specification's paths.
    assert bloom.add_many([bytearray(b"a"), b"a", memoryview(b"b")]) == [False, True, False]  # type: ignore[list-item]


@pytest.mark.parametrize("pure", ["0", "1"])
def test_a_crawl_sized_batch_loads_no_numpy(pure: str) -> None:
    # With the kernel, and without it (POLECAT_PURE_PYTHON=1) up to SMALL_BATCH keys; one key more is numpy's.
    code = ("import sys; from polecat.dedup.bloom import SMALL_BATCH, ScalableBloom; "
            "b = ScalableBloom(100, 0.01); b.add_many([b'%d' % i for i in range(SMALL_BATCH)]); "
            "a = 'numpy' in sys.modules; b.add_many([b'x%d' % i for i in range(SMALL_BATCH + 1)]); "
            "print(a, 'numpy' in sys.modules)")
    env = {**os.environ, "POLECAT_PURE_PYTHON": pure}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         env=env)
    with_kernel = pure == "0" and importlib.util.find_spec("polecat.dedup._bloom") is not None
    assert out.stdout.split() == ["False", "False" if with_kernel else "True"]


def test_add_many_runs_on_the_kernel_when_it_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel("polecat.dedup._bloom")
    if bloom_module._kernel is None:
        pytest.skip("POLECAT_PURE_PYTHON=1")

    def refuse(self: ScalableBloom, keys: list[bytes]) -> list[bool]:
        raise AssertionError("a Python path ran")

    monkeypatch.setattr(ScalableBloom, "_add_few", refuse)
    monkeypatch.setattr(ScalableBloom, "_add_vectorized", refuse)
    assert ScalableBloom(100, 0.01).add_many([b"a", b"b", b"a"]) == [False, False, True]
