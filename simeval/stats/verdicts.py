"""What an interval for B - A says: the one list of verdicts, and the one rule that reads them."""

from __future__ import annotations

VERDICTS = ("better", "worse", "equivalent", "inconclusive")


def verdict_of(low: float, high: float, margin: float = 0.0) -> str:
    """What an interval for B - A says: ``better`` above 0, ``worse`` below 0 (these take precedence),
    ``equivalent`` inside ``(-margin, margin)`` when ``margin > 0``, else ``inconclusive``."""
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    if margin > 0 and -margin < low and high < margin:
        return "equivalent"
    return "inconclusive"
