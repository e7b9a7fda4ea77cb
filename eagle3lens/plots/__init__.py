"""Presentation: plotly figures and rich tables for probe results (no probe logic)."""
