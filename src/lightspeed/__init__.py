"""lightspeed: how far a PyTorch training step runs from the speed of light of its hardware.

The public names load on first use, so that reading a trace or the GPU catalog does
not pay for importing torch.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name → the module that defines it.
_EXPORTS = {
    "Bound": "lightspeed.rules",
    "Finding": "lightspeed.rules",
    "FindingKind": "lightspeed.rules",
    "Ceilings": "lightspeed.analysis.roofline",
    "RooflinePoint": "lightspeed.analysis.roofline",
    "place": "lightspeed.analysis.roofline",
    "ProfileAnalysis": "lightspeed.analysis.profile_analysis",
    "analyse": "lightspeed.analysis.profile_analysis",
    "load_profile": "lightspeed.report.profile_json",
    "profile": "lightspeed.workflows.profile",
    "bench": "lightspeed.workflows.bench",
    "tune": "lightspeed.workflows.tune",
    "checkpoint_for_budget": "lightspeed.workflows.tune",
    "sweep": "lightspeed.workflows.sweep",
    "predict": "lightspeed.predict.whatif",
    "save_profile": "lightspeed.report.profile_json",
    "save_html": "lightspeed.report.html_save",
    "Precision": "lightspeed.dtypes",
    "LightspeedError": "lightspeed.errors",
    "ProfileIncomplete": "lightspeed.errors",
    "TraceError": "lightspeed.errors",
    "Hardware": "lightspeed.hardware",
    "catalog_hardware": "lightspeed.hardware",
    "catalog_ids": "lightspeed.hardware",
    "resolve_hardware": "lightspeed.hardware.resolve",
    "Device": "lightspeed.facts.device",
    "Phase": "lightspeed.facts.records",
    "Profile": "lightspeed.facts.profile",
    "StepSettings": "lightspeed.measure.step",
    "Measurement": "lightspeed.facts.timing",
    "TimerConfig": "lightspeed.measure.timer",
    "StepTiming": "lightspeed.facts.timing",
    "time_workload": "lightspeed.measure.workload_timing",
    "observe": "lightspeed.workflows.observe",
    "Observation": "lightspeed.workflows.observe",
    "analyse_traces": "lightspeed.trace",
    "load_traces": "lightspeed.trace",
    "Workload": "lightspeed.workload",
    "fuse": "lightspeed.optimize.fusion.fuse",
    "load_target": "lightspeed.workload.targets",
}

__all__ = [
    "Bound",
    "Ceilings",
    "Device",
    "Finding",
    "FindingKind",
    "Hardware",
    "LightspeedError",
    "Measurement",
    "Observation",
    "Phase",
    "Precision",
    "Profile",
    "ProfileAnalysis",
    "ProfileIncomplete",
    "RooflinePoint",
    "StepSettings",
    "StepTiming",
    "TimerConfig",
    "TraceError",
    "Workload",
    "analyse",
    "analyse_traces",
    "bench",
    "catalog_hardware",
    "catalog_ids",
    "checkpoint_for_budget",
    "fuse",
    "load_profile",
    "load_target",
    "load_traces",
    "observe",
    "place",
    "predict",
    "profile",
    "resolve_hardware",
    "save_html",
    "save_profile",
    "sweep",
    "time_workload",
    "tune",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lightspeed' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)


class _Facade(types.ModuleType):
    """The package's module: importing a subpackage binds it as an attribute of its
    parent, so `import lightspeed.predict.fusion` would hide the function
    `lightspeed.predict` behind the package of the same name; a public name keeps its
    function (the subpackage stays importable by its dotted path)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _EXPORTS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Facade


if TYPE_CHECKING:
    from lightspeed.analysis.profile_analysis import ProfileAnalysis, analyse
    from lightspeed.analysis.roofline import Ceilings, RooflinePoint, place
    from lightspeed.dtypes import Precision
    from lightspeed.errors import LightspeedError, ProfileIncomplete, TraceError
    from lightspeed.facts.device import Device
    from lightspeed.facts.profile import Profile
    from lightspeed.facts.records import Phase
    from lightspeed.facts.timing import Measurement, StepTiming
    from lightspeed.hardware import Hardware, catalog_hardware, catalog_ids
    from lightspeed.hardware.resolve import resolve_hardware
    from lightspeed.measure.step import StepSettings
    from lightspeed.measure.timer import TimerConfig
    from lightspeed.measure.workload_timing import time_workload
    from lightspeed.optimize.fusion.fuse import fuse
    from lightspeed.predict.whatif import predict
    from lightspeed.report.html_save import save_html
    from lightspeed.report.profile_json import load_profile, save_profile
    from lightspeed.rules import Bound, Finding, FindingKind
    from lightspeed.trace import analyse_traces, load_traces
    from lightspeed.workflows.bench import bench
    from lightspeed.workflows.observe import Observation, observe
    from lightspeed.workflows.profile import profile
    from lightspeed.workflows.sweep import sweep
    from lightspeed.workflows.tune import checkpoint_for_budget, tune
    from lightspeed.workload import Workload
    from lightspeed.workload.targets import load_target
