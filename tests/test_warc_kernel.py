"""The native WARC head (polecat/store/_warc.c) gives the bytes of its specification,
polecat.store.warc.python_record, for every input, and warc.py falls back to the specification where the
kernel refuses its input."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.store import warc
from polecat.store.base import FetchRecord
from tests.native_helpers import kernel

# Text with what the rules are about: CR, LF, lone surrogates, non-ASCII (2- and 4-byte), the Kelvin
# sign (lower()s to ASCII "k"), and the renamed names in any case.
_CHARS = st.sampled_from(["a", "Z", " ", ":", "\r", "\n", "\r\n", "\ud800", "\udfff", "é", "€", "\U0001f600",
                          "\u212a", "\u0130", "\x00", "\\"])
_TEXT = st.lists(_CHARS, max_size=12).map("".join) | st.text(max_size=20)
_NAMES = (st.sampled_from(["Content-Length", "content-encoding", "TRANSFER-ENCODING", "Content-Type",
                           "content-lengt", "Content-Length ", "X-Archive-Orig-Content-Length"])
          .flatmap(lambda n: st.sampled_from([n, n.upper(), n.lower(), n.swapcase()])) | _TEXT)


@given(fields=st.lists(_TEXT, max_size=6), content_type=_TEXT, first_line=_TEXT,
       headers=st.lists(st.tuples(_NAMES, _TEXT), max_size=6),
       length_line=st.none() | st.integers(0, 2**40) | st.booleans(), payload=st.integers(0, 2**40),
       rename=st.booleans(), end=st.booleans())
def test_the_kernel_is_the_specification(fields: list[str], content_type: str, first_line: str,
                                         headers: list[tuple[str, str]], length_line: int | None,
                                         payload: int, rename: bool, end: bool) -> None:
    native = kernel("polecat.store._warc")
    args = (fields, content_type, first_line, tuple(headers), length_line, payload, rename, end)
    assert native.record(*args) == warc.python_record(*args)
    assert native.record(fields, content_type, first_line, headers, length_line, payload, rename, end) == \
        warc.python_record(*args)  # headers as a list too


def test_whole_records_match_with_and_without_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel("polecat.store._warc")
    record = FetchRecord("http://h.test/a?b=\udcff", 1_700_000_000.25, 200,
                         (("Content-Encoding", "gzip"), ("X-Bad", "a\r\nInjected: 1"), ("Set-Cookie", "é")),
                         bytes(32), 5, truncated=True, duplicate_of="http://h.test/")
    made = [warc.encode_response_parts(record, b"hello", bytes(32), "<urn:x>"),
            warc.encode_revisit(record, ("http://h.test/", 1.0), "sha256:X", "<urn:y>"),
            warc.encode_request(record, (("User-Agent", "bot/1"),), "<urn:x>").split(b"WARC-Date")[1]]
    monkeypatch.setattr(warc, "_native_record", None)
    assert made == [warc.encode_response_parts(record, b"hello", bytes(32), "<urn:x>"),
                    warc.encode_revisit(record, ("http://h.test/", 1.0), "sha256:X", "<urn:y>"),
                    warc.encode_request(record, (("User-Agent", "bot/1"),), "<urn:x>").split(b"WARC-Date")[1]]


class _Shouting(str):
    def __format__(self, spec: str) -> str:
        return self.upper()


class _Plain(str):
    """Like multidict.istr, aiohttp's header names: a str subclass that formats as str."""


def test_str_subclasses_that_format_as_str_stay_native() -> None:
    native = kernel("polecat.store._warc")
    from multidict import istr

    for cls in (istr, _Plain):
        headers = [(cls("Content-Length"), "5"), (cls("x-a"), cls("b\r\n"))]
        args = (["A: b"], "t", cls("HTTP/1.1 200 OK"), headers, 5, 5, True, False)
        assert native.record(*args) == warc.python_record(*args)


def test_what_the_kernel_refuses_goes_to_the_specification() -> None:
    native = kernel("polecat.store._warc")
    odd = [(_Shouting("x-name"), "v"), ("n", _Shouting("value"))]
    for headers in (odd[:1], odd[1:]):
        with pytest.raises(TypeError):
            native.record(["A: b"], "t", "GET / HTTP/1.1", headers, None, 0, False, True)
        assert warc._record(["A: b"], "t", "GET / HTTP/1.1", headers, None, 0, False, True) == \
            warc.python_record(["A: b"], "t", "GET / HTTP/1.1", headers, None, 0, False, True)
    assert b"X-NAME: v" in warc._record(["A: b"], "t", "GET / HTTP/1.1", odd[:1], None, 0, False, True)
    for bad in ([("a", "b", "c")], [("a", 1)], [b"ab"], ["ab"]):
        with pytest.raises(TypeError):
            native.record(["A: b"], "t", "x", bad, None, 0, True, True)
    with pytest.raises(TypeError):
        native.record(("A: b",), "t", "x", (), None, 0, True, True)  # fields: a list
    with pytest.raises(ValueError):
        native.record([], "t", "x", (), None, -1, True, True)


@given(st.binary(min_size=32, max_size=32))
def test_payload_digest_is_the_specification(sha: bytes) -> None:
    native = kernel("polecat.store._warc")
    assert native.payload_digest(sha) == warc.python_payload_digest(sha) == warc.payload_digest_from(sha)
    assert warc.python_payload_digest(sha) == "sha256:" + base64.b32encode(sha).decode()


@given(st.binary(min_size=16, max_size=16))
def test_record_id_is_the_specification(raw: bytes) -> None:
    assert kernel("polecat.store._warc").record_id(raw) == warc.python_record_id(raw)


# Whole seconds, halves of a microsecond either side (rounding), both ends of datetime's years, and any
# float at all (NaN, infinities, years outside 1000-9999: the kernel declines, the specification decides).
_TIMES = (st.floats(allow_nan=True, allow_infinity=True)
          | st.floats(min_value=-62135596801.0, max_value=253402300801.0)
          | st.tuples(st.integers(-62135596801, 253402300800),
                      st.sampled_from([0.0, 0.5e-6, -0.5e-6, 0.9999995, 0.4999995, 1.5e-6, -0.9999995]))
          .map(sum))


@given(_TIMES)
def test_warc_date_is_the_specification(ts: float) -> None:
    native = kernel("polecat.store._warc").warc_date(ts)
    try:
        spec = warc.python_warc_date(ts)
    except (ValueError, OverflowError, OSError):  # what datetime raises outside its range
        assert native is None
        return
    assert native is None or native == spec
    if 0 <= ts < 2**34:  # every date a crawl writes: the kernel formats it
        assert native == spec


def test_refusals_of_the_small_kernels() -> None:
    native = kernel("polecat.store._warc")
    for bad in (b"x" * 31, bytearray(32), "x" * 32):
        with pytest.raises(ValueError):
            native.payload_digest(bad)
    with pytest.raises(ValueError):
        native.record_id(b"x" * 15)
    with pytest.raises(TypeError):
        native.warc_date("1.0")
    assert warc.payload_digest_from(bytearray(32)) == warc.python_payload_digest(bytes(32))


def test_warc_py_runs_on_the_kernel_when_it_is_built() -> None:
    native = kernel("polecat.store._warc")
    if warc._kernel is None:
        pytest.skip("POLECAT_PURE_PYTHON=1")
    assert warc._kernel is native and warc._native_record is native.record
