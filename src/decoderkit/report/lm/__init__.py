"""The LM's self-consistency checks of the conformance report."""
