"""pytest plugin (entry point ``pytest11``): the ``--candle-device`` option and the
``candle_device`` fixture, parametrized over every available device."""
