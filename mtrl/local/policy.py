"""A log-linear (softmax) policy over candidate actions and the Adam optimiser that trains it.

The policy scores every candidate action by ``features @ theta`` and samples from the softmax. Its
log-probability gradient for the chosen action ``a`` is ``phi(a) - E_pi[phi]``, which is all GRPO needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


def softmax(logits: FloatArray) -> FloatArray:
    shifted = logits - np.max(logits)
    weights = np.exp(shifted)
    result: FloatArray = weights / np.sum(weights)
    return result


@dataclass
class Decision:
    """One choice the policy made: the index taken and the score-function gradient of its log-probability."""

    index: int
    probability: float
    grad_log_prob: FloatArray


@dataclass
class LogLinearPolicy:
    """``pi(a | s) ∝ exp(theta · phi(s, a))`` over the candidates an agent offers in state ``s``."""

    feature_names: tuple[str, ...]
    theta: FloatArray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        if self.theta.size == 0:
            self.theta = np.zeros(len(self.feature_names))
        if self.theta.shape != (len(self.feature_names),):
            raise ValueError(f"theta has shape {self.theta.shape}, expected ({len(self.feature_names)},)")

    def probabilities(self, features: FloatArray) -> FloatArray:
        return softmax(features @ self.theta)

    def decide(self, features: FloatArray, rng: np.random.Generator, *, greedy: bool = False) -> Decision:
        """Sample (or, greedily, take the most likely, ties broken at random) one candidate row."""
        if features.ndim != 2 or features.shape[0] == 0 or features.shape[1] != self.theta.size:
            raise ValueError(f"features must be a non-empty (n, {self.theta.size}) matrix, got {features.shape}")
        probs = self.probabilities(features)
        if greedy:
            best = np.flatnonzero(probs >= probs.max() - 1e-12)
            index = int(best[0] if best.size == 1 else rng.choice(best))
        else:
            index = int(rng.choice(probs.size, p=probs))
        grad = features[index] - probs @ features
        return Decision(index=index, probability=float(probs[index]), grad_log_prob=grad)

    def to_dict(self) -> dict[str, Any]:
        return {"feature_names": list(self.feature_names), "theta": self.theta.tolist()}

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> LogLinearPolicy:
        return cls(tuple(document["feature_names"]), np.asarray(document["theta"], dtype=np.float64))


@dataclass
class Adam:
    """Adam for gradient *ascent*; its moments are part of the persisted training state."""

    learning_rate: float
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    steps: int = 0
    m: FloatArray = field(default_factory=lambda: np.zeros(0))
    v: FloatArray = field(default_factory=lambda: np.zeros(0))

    def ascend(self, theta: FloatArray, gradient: FloatArray) -> FloatArray:
        if self.m.shape != gradient.shape:
            self.m = np.zeros_like(gradient)
            self.v = np.zeros_like(gradient)
        self.steps += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * gradient
        self.v = self.beta2 * self.v + (1 - self.beta2) * gradient**2
        m_hat = self.m / (1 - self.beta1**self.steps)
        v_hat = self.v / (1 - self.beta2**self.steps)
        updated: FloatArray = theta + self.learning_rate * m_hat / (np.sqrt(v_hat) + self.epsilon)
        return updated

    def to_dict(self) -> dict[str, Any]:
        return {
            "learning_rate": self.learning_rate,
            "steps": self.steps,
            "m": self.m.tolist(),
            "v": self.v.tolist(),
        }

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> Adam:
        return cls(
            learning_rate=float(document["learning_rate"]),
            steps=int(document["steps"]),
            m=np.asarray(document["m"], dtype=np.float64),
            v=np.asarray(document["v"], dtype=np.float64),
        )
