"""``monitor annotate``: the bridge between the annotation-request topic and Label Studio.

Requests become Label Studio tasks (one per (query, document) pair still to be judged); annotations made
in Label Studio come back by webhook (and by reconciliation) as annotation events on the annotations
topic. It talks to Label Studio over HTTP only. See docs/annotate.md.
"""
