"""placeholder."""
ITEMS = ()
