"""Running the learner's code: a limited child process under a supervisor (``sandbox``,
``supervisor``, ``child``), a notebook's cells read as plain Python (``notebook``)."""
