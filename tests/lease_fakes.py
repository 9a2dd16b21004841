"""Fakes of the lease loop's seams (polecat/node/leases.py) shared by its tests."""

from __future__ import annotations

import asyncio
from typing import Any

from polecat.writes import Decided


class AppliedAsIs:
    """A frontier DB whose ``applied`` answers a decision's value, its writes dropped."""

    def applied(self, decided: Decided[object]) -> object:
        return decided.value


class FreeCommits:
    """Commits that never hold the frontier (and take no leases ahead unless a loop sets them)."""

    def __init__(self) -> None:
        self.frontier_free = asyncio.Event()
        self.frontier_free.set()
        self.lease_ahead: Any = None
