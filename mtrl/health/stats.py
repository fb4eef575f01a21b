"""The little statistics the rules need: medians, and OLS slopes with a 95% confidence half-width over windows
of a series in O(1) per window (prefix sums), so a poll over thousands of steps stays fast in pure Python."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

# Student t, two-sided 95% (the 0.975 quantile), for 1..30 degrees of freedom (standard tables).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = 1.959964


def t975(degrees_of_freedom: int) -> float:
    if degrees_of_freedom < 1:
        raise ValueError("at least one degree of freedom")
    if degrees_of_freedom <= len(_T975):
        return _T975[degrees_of_freedom - 1]
    z, df = _Z975, float(degrees_of_freedom)  # Cornish-Fisher expansion: within 1e-4 of the table beyond df 30
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@dataclass(frozen=True)
class Fit:
    slope: float
    half_width: float  # 95% confidence half-width of the slope (inf with 2 points)
    points: int

    @property
    def contains_zero(self) -> bool:
        return abs(self.slope) <= self.half_width


class Series:
    """Points (x = step, y) in increasing x; ``fit(upto_step, count)`` fits the last ``count`` points at or
    before ``upto_step``."""

    def __init__(self, points: Sequence[tuple[int, float]]) -> None:
        self.steps = [x for x, _ in points]
        self.values = [y for _, y in points]
        self._sums: list[tuple[float, float, float, float, float]] = [(0.0, 0.0, 0.0, 0.0, 0.0)]
        for x, y in points:
            sx, sy, sxx, sxy, syy = self._sums[-1]
            self._sums.append((sx + x, sy + y, sxx + x * x, sxy + x * y, syy + y * y))

    def __len__(self) -> int:
        return len(self.steps)

    def count_upto(self, step: int) -> int:
        return bisect.bisect_right(self.steps, step)

    def fit(self, upto_step: int, count: int) -> Fit | None:
        end = self.count_upto(upto_step)
        start = max(0, end - count)
        n = end - start
        if n < 3:
            return None
        high, low = self._sums[end], self._sums[start]
        sx, sy, sxx, sxy, syy = (h - lo for h, lo in zip(high, low, strict=True))
        mean_x = sx / n
        dxx = sxx - sx * mean_x
        if dxx <= 0:
            return None
        dxy = sxy - sx * sy / n
        dyy = syy - sy * sy / n
        slope = dxy / dxx
        residual = max(0.0, dyy - slope * dxy)
        standard_error = math.sqrt(residual / (n - 2) / dxx)
        return Fit(slope=slope, half_width=t975(n - 2) * standard_error, points=n)

    def fit_since(self, first_step: int, upto_step: int) -> Fit | None:
        """The fit over the points with ``first_step <= x <= upto_step``."""
        count = self.count_upto(upto_step) - bisect.bisect_left(self.steps, first_step)
        return self.fit(upto_step, count)


class RunningMedian:
    """The median of every value added so far."""

    def __init__(self) -> None:
        self._sorted: list[float] = []

    def __len__(self) -> int:
        return len(self._sorted)

    def add(self, value: float) -> None:
        bisect.insort(self._sorted, value)

    def value(self) -> float | None:
        ordered = self._sorted
        if not ordered:
            return None
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
