"""Serving a model under a latency SLO: an SLO-aware batching server and an open-loop
load generator."""
