"""The one exception type for mistakes in what a user or caller gave.

``UsageError`` is a ``ValueError`` (library callers may catch either); the command line turns
it into one line on stderr and exit status 2. Anything else is a bug and keeps its traceback.
"""


class UsageError(ValueError):
    """A bad argument, option, file or config, described in one line naming the value."""
