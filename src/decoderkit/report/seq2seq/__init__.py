"""The encoder-decoder's self-consistency checks of the conformance report."""
