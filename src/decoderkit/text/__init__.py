"""Text in and out of a model, above ``nn`` and below ``generation``: each family's tokenizers;
the LM's chat template and the sandbox its Jinja runs in."""
