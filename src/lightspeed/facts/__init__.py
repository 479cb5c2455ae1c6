"""The value types every stage passes on: what was run (`WorkloadInfo`), its timing
(`Measurement`, `StepTiming`), its ops (`OpRecord`), memory (`MemoryBreakdown`), the
hardware it is placed on (`Hardware`) and the whole `Profile`.

Plain frozen dataclasses with units in their field names. Nothing here imports torch
or runs a model: a saved profile loads and analyses on a machine without PyTorch.
"""
