"""Measurements that run in several processes under torchrun: a data-parallel (DDP)
step (`ddp_timing`), the link between two ranks (`link_bench`), and the worker each
process runs (`ddp_worker`), started by `torchrun.run_workers`.
"""
