"""Shared helpers for Torpor's tests."""
