"""The conformance suite: ``pytest --pyargs candle_api.testing.conformance [--candle-device DEV]``."""
