"""The pytest plugin, run in an inner pytest session: the fixture's config
from a marker, a parameter or a fixture; the log on a failure; the daemon's
death as the test's error."""

PLUGIN = ("-p", "monfs.pytest_plugin")

KBD = '{"usb": {"buses": [{"bus": 1, "hub_poll_ms": 0, "devices": [{"port": 1, "kind": "hid-keyboard"}]}]}}'


def test_marker_config_and_expect(pytester):
    pytester.makepyfile(test_inner="""
        import pytest

        @pytest.mark.monfs(config=%s, seed=3)
        def test_stall(monfs):
            with monfs.usbmon_text(1) as r:
                monfs.fault(1, 1, "stall")
                r.expect(kind="C", status=-32)

        @pytest.mark.monfs("usb:\\n  buses:\\n    - bus: 5\\n")
        def test_yaml_positional(monfs):
            assert (monfs.root / "usb/usbmon/5u").exists()

        @pytest.mark.monfs(config=%s, timing="fast")
        def test_fast(monfs):
            assert "--timing" in monfs.process.args and "fast" in monfs.process.args
            with monfs.usbmon_text(1) as r:
                monfs.fault(1, 1, "stall")
                r.expect(kind="C", status=-32)
    """ % (KBD, KBD))
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=3)


def test_indirect_parameter_and_config_fixture(pytester):
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def monfs_config():
            return {"usb": {"buses": [{"bus": 7}]}}
    """)
    pytester.makepyfile(test_inner="""
        import pytest

        def test_from_conftest(monfs):
            assert (monfs.root / "usb/usbmon/7u").exists()

        @pytest.mark.parametrize("monfs", [{"usb": {"buses": [{"bus": 2}]}}, {"usb": {"buses": [{"bus": 3}]}}],
                                 indirect=True)
        def test_param(monfs):
            names = sorted(p.name for p in (monfs.root / "usb/usbmon").iterdir())
            assert names[-1] in ("2u", "3u")
    """)
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=3)


def test_a_failing_test_shows_the_daemon_log(pytester):
    pytester.makepyfile(test_inner="""
        def test_fails(monfs):
            monfs.pause(1)
            assert False, "the tool under test saw nothing"
    """)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*monfs daemon log*", "*control command=\"pause 1\"*"])


def test_a_daemon_that_dies_fails_the_test_with_its_log(pytester):
    pytester.makepyfile(test_inner="""
        import os, signal

        def test_killed(monfs):
            os.kill(monfs.pid, signal.SIGKILL)
            monfs.process.wait()
    """)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*DaemonDied*exited with status -9 while mounted*"])


def test_a_refused_command_names_monfs_reason(pytester):
    pytester.makepyfile(test_inner="""
        def test_refused(monfs):
            monfs.plug(1, 99, "hid-mouse")
    """)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CommandError: monfs refused 'plug 1 99 hid-mouse': bad port path*"])


def test_expect_line_reads_a_process(pytester):
    pytester.makepyfile(test_inner="""
        import subprocess, pytest, monfs
        from monfs.pytest_plugin import expect_line

        def test_lines():
            p = subprocess.Popen(["sh", "-c", "echo one; echo two 42; sleep 60"], stdout=subprocess.PIPE)
            try:
                assert expect_line(p, r"two (\\d+)").group(1) == "42"
                with pytest.raises(monfs.ExpectationFailed):
                    expect_line(p, "three", timeout=0.5)
            finally:
                p.kill()
                p.wait()
    """)
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)
