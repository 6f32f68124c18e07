"""The child side of ``decoderkit grade``: the process that runs ONE learner file.

It imports nothing of decoderkit (the learner's answers cannot come from the reference by
accident, and the child starts with torch alone): its modules import only each other,
relatively, and ``__main__.py`` loads them under a private package name. The grader imports
the same modules (``scripted`` to know what a correct loop returns, ``main.execute`` in tests).
``main`` runs the file and the plan, ``kinds`` is the table of call kinds, ``values`` what
crosses the boundary, ``scripted`` the models decode and sampling loops run on.
"""
