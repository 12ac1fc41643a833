"""File-format plugins for candle-api. Each submodule is a plugin of its own,
found through its ``candle_api`` entry point; importing one is cheap (the
parsers load what they need when a file is read)."""

__version__ = "0.1.0"
