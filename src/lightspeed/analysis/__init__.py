"""Pure analyses over measured facts and a Hardware: roofline, diagnosis.

Nothing here runs a model.
"""
