"""The command line: one module per verb group; parsing, exit codes and logging in `cli.main`."""
