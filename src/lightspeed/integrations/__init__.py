"""lightspeed inside the training frameworks users already run: a callback per framework
(`lightspeed.integrations.transformers`), each a thin adapter over `ProfiledRun`."""

from lightspeed.integrations.run import ProfiledRun

__all__ = ["ProfiledRun"]
