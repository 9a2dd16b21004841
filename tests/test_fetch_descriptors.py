"""polecat/fetch/descriptors.py: the connection budget from the descriptor limit, and the raise of the
soft limit to the hard one (in a child process, so this one's limit stays as it was)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from polecat.errors import ConfigError
from polecat.fetch.descriptors import MIN_CONNECTIONS, RESERVED, plan_descriptors


def test_the_budget_keeps_the_reserve_and_a_fitting_concurrency_is_kept() -> None:
    budget = plan_descriptors(20_000, 256)
    assert budget.connections == 20_000 - RESERVED
    assert budget.concurrency == 256 and not budget.lowered and budget.warning() is None


def test_a_concurrency_above_the_budget_is_lowered_with_a_warning_naming_the_limit() -> None:
    budget = plan_descriptors(256, 2000)
    assert budget.concurrency == budget.connections == 256 - RESERVED
    warning = budget.warning()
    assert warning is not None and budget.lowered
    assert "2000" in warning and "RLIMIT_NOFILE" in warning and "256" in warning


def test_a_limit_too_small_for_a_node_is_a_clear_error() -> None:
    assert plan_descriptors(RESERVED + MIN_CONNECTIONS, 10).connections == MIN_CONNECTIONS
    with pytest.raises(ConfigError, match="RLIMIT_NOFILE"):
        plan_descriptors(RESERVED + MIN_CONNECTIONS - 1, 10)


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    script = (
        "import resource\n"
        "from polecat.fetch.descriptors import raise_nofile_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))\n"
        "got = raise_nofile_limit()\n"
        "now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]\n"
        "assert got == now and (now == hard or hard == resource.RLIM_INFINITY), (got, now, hard)\n"
        "assert now > 200\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
