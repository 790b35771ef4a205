"""docs/python.md's CI recipe: the shell job's commands are the GitHub
Actions job's last step word for word, and they pass here, as root and in the
rootless leg, on a copy of the checkout's python/ and examples/."""

import os
import re
import shutil
import subprocess
import sys


def block_after(text: str, marker: str) -> str:
    m = re.search(r"<!-- %s -->\n```\w+\n(.*?)```" % re.escape(marker), text, re.S)
    assert m, "docs/python.md has no block after <!-- %s -->" % marker
    return m.group(1)


def test_shell_job_is_the_actions_step_and_passes(repo, tmp_path):
    doc = (repo / "docs/python.md").read_text()
    shell = block_after(doc, "ci: shell job")
    actions = block_after(doc, "ci: github actions")
    step = actions.split("        run: |\n", 1)[1]
    step_lines = [line[10:] if line.startswith(" " * 10) else line for line in step.splitlines()]
    assert shell.splitlines() == step_lines
    checkout = tmp_path / "checkout"
    shutil.copytree(repo / "python", checkout / "python",
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    shutil.copytree(repo / "examples/pytest", checkout / "examples/pytest",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(repo / "examples/user_events_producer.c", checkout / "examples")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    out = subprocess.run(["bash", "-e", "-c", shell], cwd=checkout, env=env, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"\b8 passed\b", out.stdout), out.stdout
