"""What-if predictions: pure functions `Profile × change → Profile`, so a prediction is
analysed, reported and compared exactly as a measurement is. No change is the identity.

`predict(profile, hardware=…)`: the step on other hardware (`predict.hardware`).
"""

from __future__ import annotations

from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import Profile
from lightspeed.predict.hardware import on_hardware

__all__ = ["predict"]


def predict(profile: Profile, *, hardware: Hardware | None = None) -> Profile:
    """`profile` as it is predicted to run with the changes given (none: `profile`
    itself). `hardware`: another device, from the catalog or calibrated."""
    predicted = profile
    if hardware is not None:
        predicted = on_hardware(predicted, hardware)
    return predicted
