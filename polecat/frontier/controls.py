"""Operator controls of a frontier: throttle overrides, blocks, pause.

Rules: every control is persisted in the ``ops`` table (the writes each returns, polecat/writes.py)
and reloaded on open (host patterns are cross-slice and travel in every slice bundle, keys.py rule 4);
a block drops the queues it matches (recorded done, ``skipped:blocked``) and refuses their URLs;
removing a control applies from each host's next request.

Controls from the configuration (``politeness.throttle``, ``scope.block``) are applied at a start only when
the file names them anew or with a new rate (:meth:`Controls.from_config`): the ``ops`` table records what
the file said when it was last applied (``config-throttle:``, ``config-block:``), so a control an operator
lifted or changed through the API stays as the operator left it across restarts while the file says the
same. A pattern the file no longer names loses its record (naming it again applies it again). Data written
before these records has none: the configuration is applied once more, and recorded (no migration step).
"""

from __future__ import annotations

from collections.abc import Iterable

from polecat.frontier.host_table import HostTable
from polecat.frontier.keys import op_key
from polecat.frontier.politeness import wait_one_interval
from polecat.hosts import HostPatternMap
from polecat.writes import Decided, Delete, Put, Write

CONFIG_THROTTLE = "config-throttle"
"""Op kind: the rate ``politeness.throttle`` gave a pattern when it was last applied (module rules)."""
CONFIG_BLOCK = "config-block"
"""Op kind: a ``scope.block`` pattern applied from the configuration (module rules)."""


class Controls:
    """Throttle, block, pause: persisted in ``ops`` (keys.py rule 4), applied at once. The patterns
    themselves live in the host table (:attr:`HostTable.throttle`, :attr:`HostTable.blocked`), where
    every part reads them."""

    def __init__(self, table: HostTable) -> None:
        self._table = table
        self._hosts = table.hosts
        self._throttle = table.throttle
        self._blocked = table.blocked
        self.paused = False
        """Set by the operator: the node leases nothing while it is (persisted)."""
        self._from_config: dict[tuple[str, str], bytes] = {}
        """``(kind, pattern) -> value`` of the configuration's controls as last applied (module rules)."""

    def load_op(self, kind: str, arg: str, raw: bytes) -> None:
        """Reinstate a stored control (on open, or adopted with a slice)."""
        if kind == "block":
            self._blocked.set(arg, True)
        elif kind == "throttle":
            self._throttle.set(arg, float(raw))
        elif kind == "paused":
            self.paused = True
        elif kind in (CONFIG_THROTTLE, CONFIG_BLOCK):
            self._from_config[(kind, arg)] = raw

    def from_config(self, throttles: Iterable[tuple[str, float]], blocks: Iterable[str]) -> list[Write]:
        """The configuration's controls, applied where the file is new or changed since it was last
        applied (module rules); the records of what it said."""
        out: list[Write] = []
        said = {(CONFIG_THROTTLE, p.lower()): repr(float(rate)).encode() for p, rate in throttles}
        said |= {(CONFIG_BLOCK, p.lower()): b"" for p in blocks}
        for (kind, pattern), value in said.items():
            if self._from_config.get((kind, pattern)) == value:
                continue  # as the file said last time: an operator's change since then stands
            if kind == CONFIG_THROTTLE:
                out += self.set_throttle(pattern, float(value))
            else:
                out += self.block(pattern).writes
            out.append(Put("ops", op_key(kind, pattern), value))
        out += [Delete("ops", op_key(kind, pattern)) for kind, pattern in self._from_config.keys() - said]
        self._from_config = said
        return out

    def set_throttle(self, pattern: str, rate: float) -> list[Write]:
        """Override the request rate of hosts matching ``pattern`` (persisted)."""
        self._throttle.set(pattern, rate)
        return [Put("ops", op_key("throttle", pattern.lower()), repr(rate).encode())]

    def block(self, pattern: str) -> Decided[int]:
        """Block hosts matching ``pattern``: drop their queues (recorded done, reason ``blocked``) and
        refuse their URLs from now on (persisted). Answers the number of URLs dropped from the hosts in
        memory; a host out of memory drops its queue when it is read back (host_table.py rule 7)."""
        self._blocked.set(pattern, True)
        out: list[Write] = [Put("ops", op_key("block", pattern.lower()), b"")]
        dropped = 0
        for host in self._matching(pattern):  # the hosts of earlier blocks dropped theirs then
            st = self._hosts[host]
            if st.queued:
                dropped += self._table.drop_queue(host, st, out)
        return Decided(dropped, out)

    def _matching(self, pattern: str) -> list[str]:
        """The hosts in memory that ``pattern`` matches: those of one host name found by name
        (host_table.py rule 13), those of a ``*.`` pattern by its domain (rule 15; a domain of one label
        by a pass over memory)."""
        matcher: HostPatternMap[bool] = HostPatternMap([(pattern, True)])
        p = pattern.strip().lower()
        hosts = self._table.named(p) if not p.startswith("*.") else self._table.under(p[2:])
        return [host for host in (self._hosts if hosts is None else hosts) if host in matcher]

    def throttle_now(self, pattern: str, rate: float, now: float) -> list[Write]:
        """:meth:`set_throttle` for a running crawl: hosts it matches that wait for their next request
        wait at least one new interval from ``now``, so a slower rate applies from the next request (a
        host out of memory when it is read back, host_table.py rule 6)."""
        out = self.set_throttle(pattern, rate)
        table = self._table
        table.rethrottled.set(pattern, now)
        for host in self._matching(pattern):
            st = self._hosts[host]
            if not st.in_flight:
                wait_one_interval(table.pol, table.rate(host), st, now)
                table.save(host)
                if host in table.scheduled:
                    table.schedule(host, st.next_allowed)
        return out

    def set_paused(self, paused: bool) -> list[Write]:
        """Pause or resume leasing (persisted); see :attr:`paused`."""
        self.paused = paused
        key = op_key("paused", "")
        return [Put("ops", key, b"")] if paused else [Delete("ops", key)]

    def unthrottle(self, pattern: str) -> Decided[bool]:
        """Remove a rate override (persisted); hosts it matched return to the default rate from their
        next request. Answers False when no such override existed."""
        return Decided(self._throttle.remove(pattern), [Delete("ops", op_key("throttle", pattern.lower()))])

    def unblock(self, pattern: str) -> Decided[bool]:
        """Lift a block (persisted): the hosts' URLs are accepted again. URLs dropped by the block stay
        done (``skipped:blocked``); add them again as seeds to fetch them. Answers False when not blocked."""
        return Decided(self._blocked.remove(pattern), [Delete("ops", op_key("block", pattern.lower()))])

    def throttles(self) -> list[tuple[str, float]]:
        """Rate overrides in force, ``(pattern, req_per_s)``."""
        return sorted(self._throttle.items())

    def blocks(self) -> list[str]:
        """Block patterns in force."""
        return sorted(p for p, _ in self._blocked.items())

    def is_blocked(self, host: str) -> bool:
        return host in self._blocked
