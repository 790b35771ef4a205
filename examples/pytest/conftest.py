"""Examples of testing real tools with monfs's pytest plugin. Installed
(`pip install ./python`), the plugin loads by itself; from a checkout, run
`PYTHONPATH=python python3 -m pytest -p monfs.pytest_plugin examples/pytest`
with `MONFS_BIN` naming the monfs binary (scripts/python-tests does both)."""

