"""Judging: what an item and a seed are (``items``), the verdict on an item's outputs
against the reference and the diagnosis against the named mistakes (``judging``,
``catalogue``), learner modules built and judged from their own weights (``modules``,
whose weights ``layout`` reads by classes and shapes)."""
