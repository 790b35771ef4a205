"""Examples of testing real tools with monfs's pytest plugin. Installed
(`pip install ./python`), the plugin loads by itself; from a checkout, run
`PYTHONPATH=python python3 -m pytest -p monfs.pytest_plugin examples/pytest`
with `MONFS_BIN` naming the monfs binary (scripts/python-tests does both)."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "needs_monfs_run: uses `monfs run` (issue 36); deselected until it is merged")
