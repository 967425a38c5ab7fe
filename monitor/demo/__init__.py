"""The embedded default: the stream core in one process, fed by the simulator or a JSONL file.

``monitor demo`` runs the built-in traffic simulator through :class:`~monitor.store.memory.MemoryPipeline`
(the same join, windows and aggregates as the Kafka worker, with in-process state), serves ``/metrics``,
draws a live view, fires the canary regression alert and ends with a summary. ``monitor replay`` runs the
same engine over a file of events, ``monitor report`` turns a recorded run into an HTML page with plots.

Modules: ``settings`` (the demo's simulator and stream settings), ``engine`` (pipeline, sampling on an
event-time grid, canary verdicts and alerts; no clock), ``recording`` (the run's time series, the
``--record`` file), ``canary`` (the adapter to :mod:`monitor.core.canary`), ``summary``, ``view`` (the
live terminal view), ``server`` (``/metrics``), ``events_file`` (the JSONL reader of ``monitor replay``),
``report`` and ``plots`` (``monitor report``), and one ``*_cli`` module per command.
"""
