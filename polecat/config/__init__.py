"""The one configuration object.

The CLI, TOML files and the library API all build a :class:`Config` through :func:`config_from_mapping`,
which validates every field once, at start-up, and names the field in its error. Each component receives
only its own section. Sections are frozen, keyword-only dataclasses (polecat/config/sections.py); building
from plain data is building.py's, the checks validation.py's.
"""

from polecat.config.building import config_from_mapping, load_toml, merge
from polecat.config.sections import (
    DEFAULT_TRACKING_PARAMS,
    DEFAULT_USER_AGENT,
    PROJECT_HOMEPAGE,
    ClusterConfig,
    Config,
    DedupConfig,
    DnsConfig,
    FetchConfig,
    FrontierConfig,
    NodeConfig,
    PolitenessConfig,
    RefreshConfig,
    RobotsConfig,
    Scope,
    ScopeConfig,
    StoreConfig,
)
from polecat.config.validation import is_host_pattern, split_listen, validate

__all__ = [
    "DEFAULT_TRACKING_PARAMS", "DEFAULT_USER_AGENT", "PROJECT_HOMEPAGE", "ClusterConfig", "Config",
    "DedupConfig", "DnsConfig", "FetchConfig", "FrontierConfig", "NodeConfig", "PolitenessConfig",
    "RefreshConfig", "RobotsConfig", "Scope", "ScopeConfig", "StoreConfig", "config_from_mapping",
    "is_host_pattern", "load_toml", "merge", "split_listen", "validate",
]
