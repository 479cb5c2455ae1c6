"""Everything that runs a workload to observe it: timing, op capture, memory."""
