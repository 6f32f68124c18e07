"""What the library reports about itself: parameter counts, the conformance report, the figures."""
