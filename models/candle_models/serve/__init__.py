"""``candle serve``: an OpenAI-compatible HTTP server for chat, completions and
embeddings, with continuous batching (install with ``pip install './models[serve]'``)."""
