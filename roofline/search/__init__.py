"""``gpubench search``: which serving configuration of a model, on which GPUs, meets an SLO at a rate most cheaply,
and how to start it.  Its config (config), the space of configurations and what is pruned before simulating
(space), one configuration planned in a worker process (evaluate) with plan's own capacity search and fleet
simulation (``roofline.fleet.planner``), the worker pool, its progress and the journal an interrupted search resumes
from (pool), search.json with its Pareto front and the choice per rate and SKU (document), the chosen configuration
explained (explain: its step composition, where its decode turns compute-bound, what limits its batch), the engines'
launch scripts and Kubernetes manifest (deploy, every flag from the engine's recorded source: profiles/engines/),
the report (report) and the command as one library call (run).
"""
