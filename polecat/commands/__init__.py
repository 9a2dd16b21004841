"""polecat.commands: the ``polecat`` command, one module per subcommand (ARCHITECTURE.md)."""
