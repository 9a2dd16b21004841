"""Which discovered URLs the crawl may enter: scope mode, allow/deny regexes, spider-trap bounds.

The blocklist is not here: it is operator state that persists in the frontier (see Frontier.block).
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable

from polecat.config import ScopeConfig
from polecat.hosts import hostname


def _base_domain(name: str) -> str:
    return name[4:] if name.startswith("www.") else name


class ScopeFilter:
    """Decides whether a canonical URL is in scope. Seeds define the hosts/domains for host/domain mode."""

    def __init__(self, cfg: ScopeConfig, seed_hosts: Container[str]) -> None:
        """``seed_hosts``: the seed hosts' keys, asked in host mode (the frontier keeps them in LMDB, so
        a million seed hosts cost no memory here)."""
        self._cfg = cfg
        self._hosts = seed_hosts
        self._domains: set[str] = set()
        """The seeds' base domains, kept in domain mode only."""
        self._allow = re.compile("|".join(f"(?:{rx})" for rx in cfg.allow)) if cfg.allow else None
        self._deny = re.compile("|".join(f"(?:{rx})" for rx in cfg.deny)) if cfg.deny else None

    def add_seed_host(self, host_key: str) -> None:
        """A seed host joined ``seed_hosts``: in domain mode, its base domain joins the scope."""
        self.add_seed_hosts((host_key,))

    def add_seed_hosts(self, host_keys: Iterable[str]) -> None:
        """:meth:`add_seed_host` of each of ``host_keys`` (a seeds batch: nothing to do a host but in
        domain mode)."""
        if self._cfg.mode == "domain":
            self._domains.update(_base_domain(hostname(host_key)) for host_key in host_keys)

    def reject_reason(self, url: str, host_key: str, depth: int, *, requisite: bool = False) -> str | None:
        """None when the URL may be queued; otherwise a short reason label (counted by the frontier).
        ``requisite``: a page requisite, which the mode and depth bind only with ``requisite_hosts =
        "scope"`` (polecat/frontier/requisites.py rule 3)."""
        cfg = self._cfg
        if len(url) > cfg.max_url_length:
            return "url_too_long"
        anywhere = requisite and cfg.requisite_hosts == "any"
        if depth > cfg.max_depth and not anywhere:
            return "too_deep"
        mode = "any" if anywhere else cfg.mode
        if mode == "host":
            if host_key not in self._hosts:
                return "out_of_scope"
        elif mode == "domain":
            name = hostname(host_key)
            while name not in self._domains:
                dot = name.find(".")
                if dot < 0:
                    return "out_of_scope"
                name = name[dot + 1 :]
        if self._allow is not None and not self._allow.search(url):
            return "not_allowed"
        if self._deny is not None and self._deny.search(url):
            return "denied"
        return None
