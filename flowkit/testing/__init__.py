"""A local OpenAI-compatible server for tests, benchmarks and offline demos.

- ``server``: starting it in-process (``serve``) or in a child process (``serve_subprocess``).
- ``app``: the aiohttp routes (chat completions, embeddings, stats) and admission; ``asks``:
  what a request asks, checked as OpenAI checks it (400 otherwise).
- ``batches``: the batch API (``/v1/files``, ``/v1/batches``), answered as chat completions are.
- ``replies``: the deterministic judge replies; ``faults``: injected 429s, 500s and stalls;
  ``charges``: what a request costs the token budget under each published rule.
- ``config``: ``ServerConfig``; ``__main__``: ``python -m flowkit.testing``, the one entry point.

Nothing in flowkit imports this package; it imports only from itself.
"""
