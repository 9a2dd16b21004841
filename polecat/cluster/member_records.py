"""Member records that prove they belong: what ``/<cluster>/members/<id>`` holds in etcd, signed.

Anyone who can write to etcd could register a member and be handed slices; a record therefore carries
the HMAC of what it claims, keyed by the cluster secret, and a reader believes only records that prove
it. Sans-IO: the etcd backend (:mod:`polecat.cluster.etcd`) reads and writes the bytes.

Rules:
1. A record is JSON ``{"address", "lease", "leaving", "wire", "wire_oldest", "release", "sig"}`` (the
   wire fields: :mod:`polecat.cluster.wire` rule 2); ``sig`` is the hex HMAC-SHA256 of :func:`signed_text`:
   the cluster's name, the member id (the key's last part), its address, the etcd lease it registered
   under, its leaving flag and the wire versions and release it speaks. So a record copied to another
   id, another cluster or another address fails, and so does one re-put under another lease than the
   one it names (the lease is the one etcd reports for the key: an old record of a member that left,
   replayed by someone else, does not bring it back).
2. A record with no signature (a node of a release before signed records, or a stranger), a wrong one,
   or a lease etcd does not hold it under is ignored: it is not a member, so the Ring gives it no slice
   and no batch or bundle is sent to it. Each ignored record is counted (``ignored``, the
   ``polecat_cluster_members_ignored_total`` metric) and logged at WARNING, once per key and value (the
   member list is re-read every renewal: a record that stays is neither counted again nor floods the
   log).
3. A malformed record (not JSON, fields missing or of the wrong type) is ignored the same way.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from polecat.cluster.batch import Signer, Verifier
from polecat.cluster.membership import Member
from polecat.cluster.wire import OLD, Wire

log = logging.getLogger(__name__)

WARNED_KEEP = 4096
"""Ignored (key, value) pairs remembered so each is logged once; past this the memory starts again."""


def signed_text(cluster: str, member: Member) -> bytes:
    """What a record's signature covers (rule 1)."""
    m, w = member, member.wire
    return (f"polecat-member/1\n{cluster}\n{m.id}\n{m.address}\n{m.lease}\n{int(m.leaving)}\n"
            f"{w.oldest}-{w.newest}\n{w.release}").encode()


def parse_record(member_id: str, raw: bytes) -> tuple[Member, object]:
    """The member a record claims to be and its ``sig`` field, unverified; ValueError (or KeyError,
    TypeError, AttributeError) when it is malformed (rule 3)."""
    record = json.loads(raw)
    member = Member(member_id, str(record["address"]), leaving=record.get("leaving") is True,
                    lease=int(record.get("lease", 0)), wire=_wire(record))
    return member, record.get("sig")


def _wire(record: dict[str, object]) -> Wire:
    """The wire a record names (wire rule 2: none is 0.2.0's); ValueError when it names one badly."""
    if "wire" not in record:
        return OLD
    newest, oldest, release = record["wire"], record.get("wire_oldest", record["wire"]), record.get("release")
    if not (isinstance(newest, int) and isinstance(oldest, int) and 0 < oldest <= newest):
        raise ValueError(f"wire {newest!r}, oldest {oldest!r}")
    return Wire(oldest, newest, str(release)[:40] if release else OLD.release)


@dataclass
class MemberRecords:
    """Encodes this cluster's member records and checks the ones read (rules above)."""

    cluster: str
    sign: Signer
    verify: Verifier
    ignored: int = 0
    """Distinct records (key and value) ignored so far (rule 2)."""
    _warned: set[tuple[str, bytes]] = field(default_factory=set)

    def encode(self, member: Member) -> bytes:
        """The record of ``member`` (its ``lease`` included), signed."""
        sig = self.sign(signed_text(self.cluster, member)).hex()
        wire = member.wire
        return json.dumps({"address": member.address, "lease": member.lease, "leaving": member.leaving,
                           "wire": wire.newest, "wire_oldest": wire.oldest, "release": wire.release,
                           "sig": sig}).encode()

    def decode(self, member_id: str, raw: bytes, lease: int) -> Member | None:
        """The member ``raw`` (the value of ``member_id``'s key, held under etcd ``lease``) proves to
        be, or None when it is ignored (rules 2-3)."""
        why = None
        member = None
        try:
            member, sig = parse_record(member_id, raw)
        except (ValueError, KeyError, TypeError, AttributeError):
            why = "malformed"
        else:
            if not isinstance(sig, str) or not sig:
                why = "unsigned (written by a stranger, or by a node of a release before signed records)"
            elif not _verifies(self.verify, signed_text(self.cluster, member), sig):
                why = "its signature does not verify (not signed with this cluster's secret, or altered)"
            elif member.lease != lease:
                why = f"it names lease {member.lease:x} but etcd holds it under lease {lease:x} (replayed?)"
        if why is None:
            return member
        if (member_id, raw) not in self._warned:  # counted and logged once (rule 2)
            if len(self._warned) >= WARNED_KEEP:
                self._warned.clear()
            self._warned.add((member_id, raw))
            self.ignored += 1
            log.warning("ignoring the member record of %r: %s; it is handed nothing", member_id[:100], why)
        return None


def _verifies(verify: Verifier, data: bytes, sig: str) -> bool:
    try:
        raw = bytes.fromhex(sig)
    except ValueError:
        return False
    return verify(data, raw)
