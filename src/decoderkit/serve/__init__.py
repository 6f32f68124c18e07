"""``decoderkit serve``: a checkpoint behind an HTTP API with dynamic batching, and the
attention explorer page (``static/``). Needs the ``serve`` extra (FastAPI, uvicorn)."""
