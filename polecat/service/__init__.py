"""Service mode: the long-lived node, its HTTP API, metrics, systemd integration and status page."""
