"""The decoder-only LM's text: its tokenizer (``tokenizer``), the chat template (``chat``) and
the sandboxed Jinja environment a template runs in (``sandbox``)."""
