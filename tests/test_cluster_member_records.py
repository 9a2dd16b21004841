"""Signed member records (cluster/member_records.py rules 1-3), sans-IO."""

from __future__ import annotations

import json
import logging

import pytest

from polecat.cluster.auth import hmac_signer, hmac_verifier
from polecat.cluster.member_records import MemberRecords
from polecat.cluster.membership import Member

SECRET = "the secret of the record tests"


def _records(cluster: str = "c", secret: str = SECRET) -> MemberRecords:
    return MemberRecords(cluster, hmac_signer(secret), hmac_verifier(secret))


def test_a_record_signed_with_the_secret_proves_its_member() -> None:
    records = _records()
    me = Member("n1", "http://10.0.0.1:8470", leaving=True, lease=0x77)
    assert records.decode("n1", records.encode(me), 0x77) == me
    assert records.ignored == 0


def test_a_record_copied_altered_replayed_or_forged_is_ignored(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    records = _records()
    raw = records.encode(Member("n1", "http://10.0.0.1:8470", lease=5))
    altered = json.dumps({**json.loads(raw), "address": "http://10.6.6.6:80"}).encode()
    cases = {
        "another id": ("evil", raw, 5),
        "another cluster": ("n1", _records("d").encode(Member("n1", "http://10.0.0.1:8470", lease=5)), 5),
        "another address": ("n1", altered, 5),
        "another lease (replayed)": ("n1", raw, 6),
        "another secret": ("n1", _records(secret="not the secret, but long").encode(
            Member("n1", "http://10.0.0.1:8470", lease=5)), 5),
        "unsigned": ("n1", json.dumps({"address": "http://10.6.6.6:80", "lease": 5}).encode(), 5),
        "not hex": ("n1", json.dumps({"address": "a", "lease": 5, "sig": "zz"}).encode(), 5),
        "malformed": ("n1", b"\xff{", 5),
    }
    for name, (member_id, value, lease) in cases.items():
        assert records.decode(member_id, value, lease) is None, name
    assert records.ignored == len(cases)
    messages = [r.getMessage() for r in caplog.records]
    assert any("unsigned" in m for m in messages)
    assert any("does not verify" in m for m in messages)
    assert any("etcd holds it under lease 6" in m for m in messages)


def test_a_record_that_stays_is_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    records = _records()
    raw = json.dumps({"address": "http://10.6.6.6:80", "lease": 5}).encode()
    for _ in range(100):  # every renewal re-reads the member list
        assert records.decode("evil", raw, 5) is None
    assert records.ignored == 1
    assert len([r for r in caplog.records if "evil" in r.getMessage()]) == 1
