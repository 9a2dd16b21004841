"""One exception tree for polecat.

Third-party errors (aiohttp, aiodns, lmdb, zstandard) are translated into these at the boundary where
they occur, once. Every class says whether retrying the same operation later can succeed, so callers
decide by ``exc.retryable`` instead of matching library exception types.
"""

from __future__ import annotations


class PolecatError(Exception):
    """Root of every error polecat raises on purpose."""

    retryable: bool = False


class ConfigError(PolecatError, ValueError):
    """The configuration is invalid; the message names the offending field."""


# --- fetch -----------------------------------------------------------------------------------------


class FetchError(PolecatError):
    """A request did not produce a usable response. ``kind`` is a short stable label for metrics;
    ``host_wide``: every request to the host would fail the same way in this run (the frontier parks it:
    polecat/frontier/outcomes.py)."""

    kind: str = "fetch"
    host_wide: bool = False


class RequestWithheld(PolecatError):
    """A request was not sent: its send gate closed between its lease and its first byte (the node lost
    the host's slice; polecat/cluster/ownership.py rule 10). Not a fetch outcome: the URL stays queued;
    its owner sends it."""

    retryable = True


class DnsError(FetchError):
    """The host name did not resolve (NXDOMAIN, SERVFAIL, timeout)."""

    kind = "dns"
    retryable = True


class BlockedAddressError(FetchError):
    """The host resolved only to addresses the SSRF guard refuses (private, loopback, ...)."""

    kind = "blocked_address"
    host_wide = True


class ConnectError(FetchError):
    """TCP or TLS connection could not be established, or was reset."""

    kind = "connect"
    retryable = True


class FetchTimeout(FetchError):
    """A connect, first-byte, read-gap or total deadline passed."""

    kind = "timeout"
    retryable = True


class ProtocolError(FetchError):
    """The server spoke broken HTTP (bad status line, oversized headers, bad encoding)."""

    kind = "protocol"
    retryable = True


class TlsError(FetchError):
    """Certificate verification failed."""

    kind = "tls"


class UnsupportedUrl(FetchError):
    """The URL cannot be fetched by this crawler (scheme, malformed)."""

    kind = "unsupported_url"


# --- storage -----------------------------------------------------------------------------------------


class StoreError(PolecatError):
    """The page store failed."""


class CorruptRecord(StoreError):
    """Bytes read back do not decode or do not match their content hash."""


class NotFound(StoreError, KeyError):
    """No record for that hash or URL."""


class FrontierError(PolecatError):
    """The frontier database is unusable (schema mismatch, corruption)."""


# --- dedup -------------------------------------------------------------------------------------------


class CorruptBloom(PolecatError):
    """A saved Bloom filter file is truncated, of another format, or fails its checksum (rebuild it)."""


# --- the machine -------------------------------------------------------------------------------------


class StorageFault(PolecatError):
    """Local state could not be written for a reason of the machine (disk full, I/O error, LMDB map
    full). The node stops rather than record as done a page that was not stored; a resume after the
    fault is fixed replays what was not committed. ``path`` names the file or directory that failed,
    ``cause`` the reason in words (see polecat/faults.py)."""

    def __init__(self, message: str, *, path: str, cause: str) -> None:
        super().__init__(message)
        self.path = path
        self.cause = cause
