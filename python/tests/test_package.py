"""The package as a user gets it: its version is monfs's, `pip install`
works and registers the pytest plugin, every public name is documented and
typed, and pydoc reads well."""

import inspect
import os
import pydoc
import re
import shutil
import subprocess
import sys

import monfs
from monfs import control, descriptors, evdev, hidraw, peer, pytest_plugin, tracing, tty, usbmon


def test_version_follows_the_crate(repo):
    cargo = re.search(r'^version = "([^"]+)"', (repo / "Cargo.toml").read_text(), re.M).group(1)
    pyproject = re.search(r'^version = "([^"]+)"', (repo / "python/pyproject.toml").read_text(), re.M).group(1)
    assert monfs.__version__ == pyproject == cargo


def test_pip_install_registers_the_plugin(repo, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(repo / "python", src, ignore=shutil.ignore_patterns("__pycache__", "tests", "build",
                                                                         "*.egg-info"))
    target = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                          "--no-index", "--target", str(target), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (target / "monfs" / "py.typed").exists()
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_it.py").write_text(
        "def test_fixture(monfs):\n    assert (monfs.root / 'usb/devices').exists()\n")
    env = dict(os.environ, PYTHONPATH=str(target))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "t")],
                         capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout + run.stderr


def public_objects():
    for mod in (monfs, control, descriptors, evdev, hidraw, peer, pytest_plugin, tracing, tty, usbmon):
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                yield "%s.%s" % (mod.__name__, name), obj


def test_every_public_name_has_a_docstring_and_type_hints():
    missing = []
    for qual, obj in public_objects():
        if not inspect.getdoc(obj):
            missing.append(qual + ": no docstring")
        members = [(qual, obj)]
        if inspect.isclass(obj):
            members += [("%s.%s" % (qual, n), f) for n, f in vars(obj).items()
                        if not n.startswith("_") and (inspect.isfunction(f) or isinstance(f, property))]
        for q, f in members:
            fn = f.fget if isinstance(f, property) else f
            if not inspect.isfunction(fn):
                continue
            if not inspect.getdoc(fn):
                missing.append(q + ": no docstring")
            if getattr(fn, "_pytestfixturefunction", None) is not None:
                continue
            sig = inspect.signature(fn)
            for p in sig.parameters.values():
                if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty:
                    missing.append("%s: parameter %s has no type" % (q, p.name))
            if sig.return_annotation is inspect.Signature.empty and fn.__name__ != "__init__":
                missing.append(q + ": no return type")
    assert not missing, "\n".join(missing)


def test_pydoc_reads_well():
    text = pydoc.render_doc(monfs, renderer=pydoc.plaintext)
    for word in ("class Mount", "class Control", "class TextEvent", "run(cmd", "usbmon_text", "expect"):
        assert word in text, word
    assert "monfs from Python" in text
    out = subprocess.run([sys.executable, "-m", "pydoc", "monfs.peer"], capture_output=True, text=True,
                         env=dict(os.environ, PAGER="cat"))
    assert out.returncode == 0 and "class Device" in out.stdout and "endpoint(address: int)" in out.stdout
