"""Rendering: terminal (rich), JSON. Reports never compute; they format what analysis returned."""
