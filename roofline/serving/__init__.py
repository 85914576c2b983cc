"""Serving: step profiles, the step-cost model, workloads, batching policies and the simulator."""
