"""pytest plugin (entry point ``pytest11``) for the conformance suite.

Adds ``--candle-device`` (repeatable) and the ``candle_device`` fixture, which
runs a test once per device: the devices named on the command line, or every
available device. Loaded in every pytest session of an environment with
candle-api installed, so it stays cheap: nothing is resolved until a test asks
for ``candle_device``.
"""

from __future__ import annotations

import os

import pytest

from candle_api.errors import UnsupportedDTypeError, UnsupportedOpError

#: Where test_vector_math stores {(device, function): (measured ulp, bound)}.
VECTOR_MATH_KEY = pytest.StashKey[dict]()
#: The devices tests ran on (for the summary of decompositions).
DEVICES_KEY = pytest.StashKey[set]()


def pytest_addoption(parser):
    group = parser.getgroup("candle_api", "candle-api conformance")
    group.addoption(
        "--candle-device",
        action="append",
        default=[],
        metavar="DEVICE",
        help="run the candle-api conformance tests on DEVICE (e.g. cpu, cuda:0); repeatable; "
        "default: every available device",
    )
    group.addoption(
        "--candle-strict",
        action="store_true",
        help="fail, instead of skipping, a case whose kernel the device lacks (for a backend that claims the "
        "whole contract for the dtypes it holds; a case in a dtype it does not hold is skipped either way)",
    )
    group.addoption(
        "--candle-bench-all",
        action="store_true",
        help="candle_api.testing.benchmarks: every standard case, not only those of `candle bench --quick`",
    )


def pytest_configure(config):
    """A device that no installed plugin provides, or that cannot run here, is
    one usage error naming the devices there are, not a failure per test."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # the cpu pool's threads spin 5 ms after each job for the next one: beside a second test process
        # that is the other core's time taken, for nothing the tests measure
        os.environ.setdefault("CANDLE_SPIN_US", "0")
    wanted = config.getoption("candle_device", default=None)
    if not wanted:
        return
    from candle_api.device import get_device
    from candle_api.errors import DeviceError

    for name in wanted:
        try:
            get_device(name)
        except DeviceError as exc:
            installed = ", ".join(available_devices()) or "none"
            raise pytest.UsageError(f"--candle-device {name}: {exc}\ninstalled devices: {installed}") from None


def missing_kernel(config, reason: str) -> None:
    """A case the device has no kernel for: skipped, or failed with --candle-strict."""
    if config.getoption("candle_strict", default=False):
        pytest.fail(f"{reason} (--candle-strict)", pytrace=False)
    pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """In a test that runs on a device, an op the device has no kernel (and no
    decomposition) for is a missing kernel: a backend being written sees
    which, instead of failures. A dtype the device does not hold
    (BackendSpec.dtypes: no f64 on a GPU without it) is outside what it
    claims: that case is skipped, with --candle-strict too."""
    try:
        return (yield)
    except UnsupportedDTypeError as exc:
        if "candle_device" not in pyfuncitem.fixturenames:
            raise
        pytest.skip(f"not held: {exc}")
    except UnsupportedOpError as exc:
        if "candle_device" not in pyfuncitem.fixturenames:
            raise
        missing_kernel(pyfuncitem.config, f"not implemented: {exc}")


def available_devices() -> list[str]:
    from candle_api.registry import registry

    out = []
    for dev_type, (spec, _plugin) in sorted(registry().backends().items()):
        ok, _reason = spec.availability()
        if ok:
            out.append(dev_type if dev_type == "cpu" else f"{dev_type}:0")
    return out


def pytest_generate_tests(metafunc):
    if "candle_device" in metafunc.fixturenames:
        devices = metafunc.config.getoption("candle_device") or available_devices()
        metafunc.config.stash.setdefault(DEVICES_KEY, set()).update(devices)
        metafunc.parametrize("candle_device", devices, scope="session")


def pytest_sessionfinish(session):
    """A pytest-xdist worker hands the devices it ran on and the vector math
    errors it measured to the controller, whose summary prints them."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["candle_devices"] = sorted(session.config.stash.get(DEVICES_KEY, set()))
        output["candle_vector_math"] = [[device, name, err, bound] for (device, name), (err, bound)
                                        in session.config.stash.get(VECTOR_MATH_KEY, {}).items()]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """(pytest-xdist, in the controller) a worker's part of the summary."""
    output = getattr(node, "workeroutput", {})
    node.config.stash.setdefault(DEVICES_KEY, set()).update(output.get("candle_devices", ()))
    measured = node.config.stash.setdefault(VECTOR_MATH_KEY, {})
    for device, name, err, bound in output.get("candle_vector_math", ()):
        measured[(device, name)] = (err, bound)


def pytest_terminal_summary(terminalreporter, config):
    _report_decompositions(terminalreporter, config)
    measured = config.stash.get(VECTOR_MATH_KEY, None)
    if not measured:
        return
    terminalreporter.section("candle-api vector math: max error (ulp) / bound")
    for device in sorted({d for d, _ in measured}):
        row = ", ".join(f"{name} {err:.2f}/{bound:g}" for (d, name), (err, bound) in sorted(measured.items())
                        if d == device)
        terminalreporter.write_line(f"{device}: {row}")


def _report_decompositions(terminalreporter, config) -> None:
    """The optional rows each device under test has no kernel for: its cases
    passed through the core's decompositions, not through kernels."""
    if not config.stash.get(DEVICES_KEY, None):
        return
    from candle_api.device import get_device
    from candle_api.info import decomposed_rows

    lines = []
    for name in sorted(config.stash[DEVICES_KEY]):
        rows = decomposed_rows(get_device(name).type)
        lines.append(f"{name}: {', '.join(rows) if rows else 'none'}")
    terminalreporter.section("candle-api optional rows run as decompositions")
    for line in lines:
        terminalreporter.write_line(line)
