"""End-to-end fixtures: the whole pipeline running against the real stack."""

from tests.e2e.pipeline import pipeline

__all__ = ["pipeline"]
