"""One cycle of the daemon: read, plan, write, remember; reset; the state store; the backends."""
