"""Budgets: how much a job's tree, or a whole day, may spend, and what happens as it gets there.

A budget on a job caps its whole subtree (the job and every descendant), in dollars, tokens or both;
the config's ``budget_daily_usd`` caps everything spent on one day. At ``WARN_AT`` of either figure
the person is told once; at the cap the tree's turns are stopped (a stop by "budget") and, for as
long as it stays there, new spawns and new turns under it are refused (a message, a child's report). Raising a budget sets its level back to what the spend reaches now.
Pure functions of the figures: the daemon (roost/daemon/engine/spend.py) gives them.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The share of a budget at which the person is told (docs/config.md#budgets).
WARN_AT = 0.8
#: The levels a budget reaches, in order.
LEVELS = ("ok", "warn", "over")


@dataclass(frozen=True)
class Budget:
    """A cap; either figure may be None (no cap on it)."""

    usd: float | None = None
    tokens: int | None = None

    def capped(self) -> bool:
        return self.usd is not None or self.tokens is not None

    def words(self) -> str:
        parts = ([f"${self.usd:g}"] if self.usd is not None else []) + (
            [f"{self.tokens} tokens"] if self.tokens is not None else [])
        return " and ".join(parts) or "no cap"


@dataclass(frozen=True)
class Spent:
    usd: float = 0.0
    tokens: int = 0


def share(budget: Budget, spent: Spent) -> float:
    """The larger of the shares spent (0 with no cap; a cap of 0 is spent at once)."""
    shares = [spent.usd / budget.usd if budget.usd else (1.0 if budget.usd == 0 else 0.0),
              spent.tokens / budget.tokens if budget.tokens else (1.0 if budget.tokens == 0 else 0.0)]
    return max(shares)


def level(budget: Budget, spent: Spent) -> str:
    """``ok``, ``warn`` (at WARN_AT or more) or ``over`` (at the cap or more)."""
    if not budget.capped():
        return "ok"
    got = share(budget, spent)
    return "over" if got >= 1.0 else "warn" if got >= WARN_AT else "ok"


def crossed(before: str, budget: Budget, spent: Spent) -> str | None:
    """The level the spend has newly reached (``warn`` or ``over``), or None when it is no higher
    than ``before``: each level is acted on once, however many calls follow."""
    now = level(budget, spent)
    return now if LEVELS.index(now) > LEVELS.index(before) else None


def describe(budget: Budget, spent: Spent, where: str) -> str:
    """How a budget's state reads on the timeline and in a refusal."""
    return (f"{where} spent ${spent.usd:.4f} and {spent.tokens} tokens of its budget of {budget.words()} "
            f"({share(budget, spent):.0%})")


def spawn_refusal(budgets: list[tuple[str, Budget, Spent]]) -> str | None:
    """Why a spawn or a turn under these budgets (the job's ancestors' and the day's, each with
    where it is set and what was spent under it) is refused, or None: any one at its cap refuses it."""
    for where, budget, spent in budgets:
        if level(budget, spent) == "over":
            return f"refused: {describe(budget, spent, where)}; raise it with `roost budget`"
    return None


#: The caller a budget's stop goes by (``budget:JOB``, or ``budget:day``): no job id has a colon.
STOP_CALLER = "budget:"


def stop_reason(caller: str | None) -> str | None:
    """How a stop by a budget reads on the job's timeline, or None for any other caller."""
    if not caller or not caller.startswith(STOP_CALLER):
        return None
    owner = caller.removeprefix(STOP_CALLER)
    return "stopped by the daily budget" if owner == "day" else f"stopped by the budget of job {owner}"
