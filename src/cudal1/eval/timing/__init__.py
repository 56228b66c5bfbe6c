"""Measurement: paired timing of reference and candidate, its statistics, and the speed of light."""
