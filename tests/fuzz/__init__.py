"""A fuzz harness for candle-api: seeded cases from several families (file
formats, hostile pickles, read-only memory, the Tensor API against NumPy,
the CLI, faults during save) run in worker processes that a crash, a hang or
a memory hog can only take down alone. Run ``python -m tests.fuzz --help``
from the repository root; docs/testing.md describes it."""
