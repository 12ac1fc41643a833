"""Runs candle-pyo3's own test suite (``candle-pyo3/tests`` of a checkout of
huggingface/candle) unchanged against candle-api, with ``import candle``
meaning ``candle_api.compat.pyo3``.

    python tools/run_pyo3_tests.py PATH_TO_CANDLE_CHECKOUT [pytest arguments...]

The tests are copied to a temporary folder (they write a ``_workdir`` next to
themselves) beside a ``candle`` package whose ``__init__`` installs the
namespace under that name, and pytest runs there; its exit status is this
script's. Outside CI: CI has no candle checkout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SHIM = '''"""candle-pyo3's ``candle`` package, served by candle_api.compat.pyo3 (see tools/run_pyo3_tests.py)."""
import candle_api.compat.pyo3 as _namespace

_namespace.install_as(__name__)
'''


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 2
    tests = Path(argv[0]) / "candle-pyo3" / "tests"
    if not tests.is_dir():
        print(f"run_pyo3_tests: {tests} is not a folder (give the root of a huggingface/candle checkout)",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="candle-pyo3-tests-") as tmp:
        root = Path(tmp)
        shutil.copytree(tests, root / "tests")
        (root / "candle").mkdir()
        (root / "candle" / "__init__.py").write_text(SHIM)
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(root), str(root / "tests"),
               *argv[1:]]
        return subprocess.call(cmd, cwd=root)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
