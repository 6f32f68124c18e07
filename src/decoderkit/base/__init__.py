"""The bottom layer: what every other layer may use (user errors, atomic file writes)."""
