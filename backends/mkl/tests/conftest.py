"""The mkl plugin's tests run with every MKL kernel forced on (whatever this
machine's kernel choice says), and with the choice file of a scratch cache, so
that a developer's own `candle bench` verdicts never change what they test."""

import atexit
import os
import shutil
import tempfile

os.environ["CANDLE_FORCE_PLUGINS"] = "mkl"
os.environ["CANDLE_CACHE_DIR"] = tempfile.mkdtemp(prefix="candle-mkl-tests-")
atexit.register(shutil.rmtree, os.environ["CANDLE_CACHE_DIR"], ignore_errors=True)
os.environ.pop("CANDLE_DISABLE_PLUGINS", None)
