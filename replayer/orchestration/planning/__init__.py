"""Layout planning (``tracekit plan``): the fastest layout of a model on N GPUs that fits, found by simulation.

:mod:`.enumerate` lists the layouts, :mod:`.bounds` bounds their step times from the generator's op blocks,
:mod:`.simulate` times one by generating it as a rank-class set and replaying it folded, :mod:`.search` runs
the branch-and-bound search on :mod:`.pool`, and :mod:`.page` draws the HTML page.
"""
