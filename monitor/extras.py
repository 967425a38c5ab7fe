"""Optional dependencies: a command that needs one says which extra installs it, instead of a traceback.

The core install (numpy, prometheus-client) runs ``monitor demo``, ``replay`` and ``evaluate --sessions``;
the worker's Kafka and Redis clients are the ``worker`` extra. Two heavy packages that the worker never
imports are extras of their own, imported only by the commands that use them:

==========  ============  ===============================================
extra       package       needed by
==========  ============  ===============================================
offline     pyarrow       ``monitor evaluate QRELS RUN`` (TREC files)
report      matplotlib    ``monitor report``
==========  ============  ===============================================
"""

from __future__ import annotations

import importlib

DISTRIBUTION = "search-relevance-monitor"


def missing_extra(module: str, extra: str, needed_by: str) -> str | None:
    """None if ``module`` imports, else a message naming the extra that installs it.

    >>> missing_extra("json", "offline", "monitor evaluate") is None
    True
    >>> print(missing_extra("no_such_module", "offline", "monitor evaluate"))  # doctest: +ELLIPSIS
    monitor evaluate needs no_such_module, which is not installed: pip install '...[offline]'
    """
    try:
        importlib.import_module(module)
    except ImportError as error:
        installed_but_broken = error.name is not None and error.name.split(".")[0] != module
        reason = f" ({error})" if installed_but_broken else ", which is not installed"
        return f"{needed_by} needs {module}{reason}: pip install '{DISTRIBUTION}[{extra}]'"
    return None
