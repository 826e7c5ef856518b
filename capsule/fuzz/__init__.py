"""``capsule fuzz``: mutated inputs through every part of capsule that reads what a user hands it.

``targets`` says what each target runs and which answers count as refusals; ``mutate`` makes the inputs from a
seed, ``engine`` runs them and records failures, ``reduce`` shrinks a failing input.
"""

from .engine import Finding, Problem, TargetReport, attempt, input_for, run_target
from .targets import TARGETS, Target

__all__ = ["Finding", "Problem", "TARGETS", "Target", "TargetReport", "attempt", "input_for", "run_target"]
