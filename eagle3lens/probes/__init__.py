"""Probes: plain functions over plain inputs returning frozen results with findings."""
