"""The child's script: ``python -I .../run/child/__main__.py WORKDIR LEARNER_FILE``.

``-I`` keeps the learner's directory, the environment's paths and user site-packages out of
``sys.path``, so this package is loaded from its own directory under a private name (never
as ``decoderkit...``: nothing of decoderkit is imported) and ``main.main`` runs the plan.
"""

import importlib.util
import os
import sys

PACKAGE = "_decoderkit_grade_child"  # not "decoderkit...": the learner's imports are reported


def load_package():
    """This directory as the package ``PACKAGE`` (its modules import each other relatively)."""
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(PACKAGE, os.path.join(here, "__init__.py"),
                                                  submodule_search_locations=[here])
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)
    return importlib.import_module(f"{PACKAGE}.main")


if __name__ == "__main__":
    load_package().main(sys.argv[1], sys.argv[2])
