"""The Beam metrics namespace of the embed and cluster counters that jobs read back."""

from __future__ import annotations

METRICS_NAMESPACE = "sbert"
