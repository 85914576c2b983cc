"""Fleets: replicas of one step profile behind a router (round robin, least outstanding requests, shortest
queue), and disaggregated prefill and decode replicas with the KV cache handed between them.
Every step, latency, capacity and KV formula is the serving room's (``roofline.serving``), called, never
rewritten."""
