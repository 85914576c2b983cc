"""Real engines driven on a workload, for ``gpubench validate``: each records per-request arrival, first
token and finish on one clock, so a simulation of the same workload can be checked against it."""
