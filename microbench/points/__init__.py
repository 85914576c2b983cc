"""What a run is asked to measure, read by both the timing room and the sweep: a sweep's options and the one config
built from them (``config``: ``SweepConfig``, every option checked before torch is imported), and its points (``plan``:
the default shapes and batches per device, the point specs, parsing batches and shapes).  Imports no other room of
microbench.
"""
