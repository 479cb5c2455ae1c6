"""lightspeed: how far a PyTorch training step runs from the speed of light of its hardware."""

from lightspeed.analysis.roofline import Bound, Ceilings, RooflinePoint, place
from lightspeed.api import ProfileAnalysis, analyse, load_profile, profile, save_profile
from lightspeed.dtypes import Precision
from lightspeed.errors import LightspeedError, ProfileIncomplete
from lightspeed.hardware import Hardware, catalog_hardware, catalog_ids, resolve_hardware
from lightspeed.measure.device import Device
from lightspeed.measure.profile_facts import Profile
from lightspeed.measure.step import StepSettings
from lightspeed.measure.timer import Measurement, TimerConfig
from lightspeed.measure.timing import StepTiming, time_workload
from lightspeed.workload import Workload, load_target

__version__ = "0.1.0"

__all__ = [
    "Bound",
    "Ceilings",
    "Device",
    "Hardware",
    "LightspeedError",
    "Measurement",
    "Precision",
    "Profile",
    "ProfileAnalysis",
    "ProfileIncomplete",
    "RooflinePoint",
    "StepSettings",
    "StepTiming",
    "TimerConfig",
    "Workload",
    "analyse",
    "catalog_hardware",
    "catalog_ids",
    "load_profile",
    "load_target",
    "place",
    "profile",
    "resolve_hardware",
    "save_profile",
    "time_workload",
]
