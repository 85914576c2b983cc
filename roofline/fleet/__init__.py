"""Fleets: replicas of one step profile behind a router (round robin, least outstanding requests, shortest
queue), disaggregated prefill and decode replicas with the KV cache handed between them, and the planner that
answers how many GPUs of which candidate serve a traffic within an SLO, and at what cost per million tokens.
Every step, latency, capacity and KV formula is the serving room's (``roofline.serving``), called, never
rewritten."""
