"""What a proxy setting may say: ``http://[user:password@]host[:port]`` (``fetch.proxy``, and the
``HTTP_PROXY``/``HTTPS_PROXY`` variables when ``fetch.proxy_env`` reads them). The routing itself is
polecat/fetch/proxy.py's; this is the one reader of the text, so the config check and the fetcher agree.

Rules:

1. The scheme is ``http`` (written or left out, as curl reads ``proxy:3128``); the port defaults to 1080
   like curl's. A proxy spoken to over TLS (``https://``) or SOCKS is refused by name: the connection to
   the proxy is plain TCP.
2. A host is required; a path, query or fragment is refused (no proxy reads one); userinfo becomes a
   ``Proxy-Authorization: Basic`` header, percent-decoded.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from polecat.errors import ConfigError

__all__ = ["DEFAULT_PROXY_PORT", "ProxyAddress", "parse_proxy"]

DEFAULT_PROXY_PORT = 1080
"""curl's default proxy port (rule 1)."""


@dataclass(frozen=True, slots=True)
class ProxyAddress:
    """Where a proxy listens, and the credentials it wants."""

    host: str
    """A name or an IP literal, without brackets."""
    port: int
    authorization: str | None = None
    """The ``Proxy-Authorization`` value, from the URL's userinfo."""

    def __str__(self) -> str:  # no credentials: this is what logs and errors show
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def parse_proxy(text: str, name: str) -> ProxyAddress:
    """The proxy ``text`` names; ConfigError naming the setting ``name`` when it is not one (rules 1-2)."""
    value = text.strip()
    if "://" not in value:
        value = "http://" + value
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{name}: {text!r} is not a proxy URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme != "http":
        raise ConfigError(f"{name}: {text!r}: only http:// proxies are supported (TLS to the target runs "
                          f"inside a CONNECT tunnel through them); {scheme}:// is not")
    host = parts.hostname
    if not host or any(c <= " " or c == "\x7f" for c in host):
        raise ConfigError(f"{name}: {text!r} names no proxy host (http://host:port)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"{name}: {text!r}: a proxy URL has no path or query (http://host:port)")
    if port == 0:
        raise ConfigError(f"{name}: {text!r}: port 0 cannot be connected to (1-65535)")
    authorization = None
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        try:
            raw = credentials.encode("latin-1")
        except UnicodeEncodeError:
            raise ConfigError(f"{name}: the proxy credentials must be Latin-1 text") from None
        authorization = "Basic " + base64.b64encode(raw).decode("ascii")
    return ProxyAddress(host, port or DEFAULT_PROXY_PORT, authorization)
