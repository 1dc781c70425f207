"""The service: the daemon loop and how it speaks to systemd."""
