"""The test suite's shared modules: `polling` (wait on a condition), `helpers` (the
report fixture, cycle reports, the observe verbs, metric samples) and the
fixtures of `conftest`.

Only `tests` itself is a package. The test folders (unit/, integration/) are
not: pytest puts each on sys.path, so a test imports its neighbours by bare name
(`from builders import ...`) and these shared modules as `tests.*`.
"""
