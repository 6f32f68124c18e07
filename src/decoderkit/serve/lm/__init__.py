"""The decoder-only LM as a service: OpenAI's legacy Completions API (``app``) over a
continuous-batching worker (``worker``) that steps every running request together."""
