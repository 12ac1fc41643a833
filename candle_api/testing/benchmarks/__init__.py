"""The standard benchmark cases under pytest-benchmark (see test_cases.py)."""
