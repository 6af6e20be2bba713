"""What jobs spend: each model call an agent reports is kept once (roost/daemon/storage/usage.py),
added to its job's figures and to the kept sums of the budgets above it; a budget that reaches its
warning share or its cap is acted on once (roost/rules/budgets.py says when).

The engine calls :func:`on_call` from its ``usage`` event and :func:`on_set_budget` for the
``SetBudget`` message (``roost budget``); the supervisor calls :func:`check_spawn` and
:func:`set_budget` at spawn.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from roost.daemon.engine import messages as m
from roost.daemon.storage.usage import Call, day_of
from roost.drivers import driver_for
from roost.models import Job, State
from roost.protocol import ErrorCode, ProtocolError
from roost.rules.budgets import STOP_CALLER, Budget, Spent, crossed, describe, level, spawn_refusal
from roost.worker_protocol import TOKEN_KINDS

from roost.daemon.engine.ports import EngineApi
from roost.daemon.storage.index import JobIndex

#: The figures a job's ``usage`` keeps from its calls (the row's; context figures come beside them).
SUMS = (*TOKEN_KINDS, "cost")
#: Where the daily budget is set, for the words and the stop's caller.
DAY = "the day"


@dataclass
class Kept:
    """One budget and what was spent under it so far (kept, not recomputed on each call)."""

    budget: Budget
    level: str
    spent: Spent = field(default_factory=Spent)


@dataclass
class Ledger:
    """The budgets of one engine, with their spend; the day's spend, for the day it is; and each
    job's subtree figures (SUMS, and whether a cost in them is an estimate), kept as calls come."""

    budgets: dict[str, Kept]
    trees: dict[str, list[float]] = field(default_factory=dict)
    estimated: set[str] = field(default_factory=set)
    day: str = ""
    today: Spent = field(default_factory=Spent)
    day_level: str = "ok"

    @classmethod
    def from_index(cls, index: "JobIndex", stored: Iterable[tuple[str, dict[str, Any]]]) -> "Ledger":
        """Each job's figures added up its ancestors: the deepest jobs first, each adding its
        subtree's to its parent's (one pass, as the index counts descendants). A loaded job's
        figures are its record's in memory; the others' come from ``stored`` (the store's
        records with figures, ``Store.stored_usage``): no record is loaded for it."""
        book = cls({})
        jobs, trees, estimated = index.jobs, book.trees, book.estimated
        for job_id, usage in stored:
            if _spent(usage) and not isinstance(jobs.facts(job_id), Job):
                book.add((job_id,), usage, bool(usage.get("cost_estimate")))
        for fact in jobs.every_fact():
            if isinstance(fact, Job) and _spent(fact.usage):
                book.add((fact.id,), fact.usage, bool(fact.usage.get("cost_estimate")))
        for job_id in sorted(trees, key=lambda i: -jobs.facts(i).depth):  # type: ignore[union-attr]
            mine, parent = trees[job_id], jobs.facts(job_id).parent  # type: ignore[union-attr]
            if not parent or parent not in jobs:
                continue
            theirs = trees.get(parent)
            trees[parent] = mine[:] if theirs is None else [a + b for a, b in zip(theirs, mine)]
            if job_id in estimated:
                estimated.add(parent)
        return book

    def keep(self, owners: Iterable[str]) -> Callable[[], None]:
        """What puts back the owners' figures, their budgets' levels and spend and the day's as
        they are now (for ``EngineApi.undo``: the journal holds records, not the ledger)."""
        owners = tuple(owners)
        trees = {o: (t[:] if (t := self.trees.get(o)) is not None else None) for o in owners}
        estimated = {o for o in owners if o in self.estimated}
        budgets = {o: (k.level, k.spent) for o in owners if (k := self.budgets.get(o)) is not None}
        day = (self.day, self.today, self.day_level)

        def back() -> None:
            for owner, tree in trees.items():
                if tree is None:
                    self.trees.pop(owner, None)
                else:
                    self.trees[owner] = tree
                (self.estimated.add if owner in estimated else self.estimated.discard)(owner)
            for owner, (level_, spent) in budgets.items():
                if (kept := self.budgets.get(owner)) is not None:
                    kept.level, kept.spent = level_, spent
            self.day, self.today, self.day_level = day
        return back

    def add(self, owners: Iterable[str], figures: Mapping[str, Any], estimate: bool) -> None:
        """Add a job's figures to its subtree's and to each of its ancestors' (``owners``)."""
        values = [_number(figures.get(k)) for k in SUMS]
        for owner in owners:
            kept = self.trees.get(owner)
            if kept is None:
                self.trees[owner] = list(values)
            else:
                for i, v in enumerate(values):
                    kept[i] += v
            if estimate:
                self.estimated.add(owner)

    def tree(self, job_id: str) -> dict[str, Any]:
        kept = self.trees.get(job_id) or [0.0] * len(SUMS)
        out: dict[str, Any] = {k: (v if k == "cost" else int(v)) for k, v in zip(SUMS, kept)}
        return {**out, "cost_estimate": job_id in self.estimated}

    def spent(self, job_id: str) -> Spent:
        tree = self.tree(job_id)
        return Spent(float(tree["cost"]), tokens_of(tree))


def _spent(usage: Mapping[str, Any]) -> bool:
    """Whether a record's usage has any of the figures the ledger sums (a built-in job's has none)."""
    return any(usage.get(k) for k in SUMS)


def _number(value: Any) -> float:
    return float(value) if type(value) in (int, float) else 0.0


_LEDGERS: "weakref.WeakKeyDictionary[EngineApi, Ledger]" = weakref.WeakKeyDictionary()


def ledger(eng: EngineApi) -> Ledger:
    """The engine's ledger, made from the records the first time (one pass, each job up its
    ancestors, loading no record: docs/performance.md), kept from then on."""
    found = _LEDGERS.get(eng)
    if found is None:
        found = _LEDGERS[eng] = Ledger.from_index(eng.index, eng.store.stored_usage())
        for job_id, (usd, tokens, reached) in eng.store.usage.budgets().items():
            if eng.index.get(job_id) is not None:
                found.budgets[job_id] = Kept(Budget(usd, tokens), reached, found.spent(job_id))
    today = day_of(eng.clock())
    if found.day != today:
        usd, tokens = eng.store.usage.spent_since(today)
        found.day, found.today, found.day_level = today, Spent(usd, tokens), "ok"
    return found


def tokens_of(usage: Mapping[str, Any]) -> int:
    """The tokens a budget counts: input (the cached part in it) and output."""
    return int(usage.get("input") or 0) + int(usage.get("output") or 0)


def priced(model: str, tokens: Mapping[str, int], prices: Mapping[str, Mapping[str, float]]) -> float | None:
    """A call's cost from the config's ``[prices.MODEL]`` (dollars per million tokens), or None when
    the model has no price. Input is priced without its cached part, which has prices of its own."""
    price = prices.get(model)
    if price is None:
        return None
    fresh = max(0, tokens.get("input", 0) - tokens.get("cache_read", 0) - tokens.get("cache_write", 0))
    counts = {"input": fresh, "output": tokens.get("output", 0), "cache_read": tokens.get("cache_read", 0),
              "cache_write": tokens.get("cache_write", 0)}
    return sum(counts[k] * price.get(k, 0.0) for k in counts) / 1e6


def call_of(job_id: str, raw: Mapping[str, Any], prices: Mapping[str, Mapping[str, float]],
            root: str = "") -> Call | None:
    """The call a ``usage`` event's ``call`` describes, or None when it names no call id."""
    call_id = raw.get("id")
    if not isinstance(call_id, str) or not call_id:
        return None
    model = str(raw.get("model") or "")
    tokens = {k: v if isinstance(v := raw.get(k), int) and not isinstance(v, bool) and v >= 0 else 0
              for k in TOKEN_KINDS}
    cost = raw.get("cost_usd")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost >= 0:
        return Call(job_id, call_id, model, tokens, float(cost), False, root)
    estimate = priced(model, tokens, prices)
    return Call(job_id, call_id, model, tokens, estimate, estimate is not None, root)


def on_call(eng: EngineApi, job: Job, raw: Mapping[str, Any]) -> None:
    """Keep one call the job's agent reported (a call seen before adds nothing), then look at the
    budgets it counts against."""
    owners = (job.id, *eng.index.ancestors(job.id))
    call = call_of(job.id, raw, eng.config.prices, root=owners[-1])
    if call is None:
        return
    book = ledger(eng)  # made from the records before this call is in them, so it is added once
    with eng.store.transaction():
        if not eng.store.usage.add(call, eng.clock()):
            return
        usage = dict(job.usage)
        for key in TOKEN_KINDS:
            usage[key] = int(usage.get(key) or 0) + call.tokens[key]
        if call.cost is not None:
            usage["cost"] = float(usage.get("cost") or 0.0) + call.cost
        if call.estimate:
            usage["cost_estimate"] = True
        job.usage = usage
        eng.save(job)
        _count(eng, book, owners, call)


def _count(eng: EngineApi, book: Ledger, owners: tuple[str, ...], call: Call) -> None:
    eng.undo(book.keep(owners))  # a change the store refuses is applied again: counted once
    book.add(owners, {**call.tokens, "cost": call.cost or 0.0}, call.estimate)
    spent = Spent(call.cost or 0.0, call.tokens["input"] + call.tokens["output"])
    for owner in owners:
        kept = book.budgets.get(owner)
        if kept is None:
            continue
        kept.spent = Spent(kept.spent.usd + spent.usd, kept.spent.tokens + spent.tokens)
        reached = crossed(kept.level, kept.budget, kept.spent)
        if reached is not None:
            kept.level = reached
            eng.store.usage.set_level(owner, reached)
            _act(eng, owner, reached, kept.budget, kept.spent)
    book.today = Spent(book.today.usd + spent.usd, book.today.tokens + spent.tokens)
    daily = Budget(eng.config.budget_daily_usd)
    reached = crossed(book.day_level, daily, book.today)
    if reached is not None:
        book.day_level = reached
        _act(eng, None, reached, daily, book.today)


def _act(eng: EngineApi, owner: str | None, reached: str, budget: Budget, spent: Spent) -> None:
    """Tell the person (a ``budget`` entry on the owner's timeline, or on each running job's for the
    day), and at the cap stop the turns under it: a stop by the budget, not a failure."""
    where = f"job {owner}" if owner else "today's jobs"
    text = describe(budget, spent, where) + (": its turns are stopped and new spawns under it refused"
                                             if reached == "over" else "")
    if owner is not None:
        jobs = [eng.index.require(owner), *eng.index.descendants(owner)]
        eng.timeline(jobs[0], "budget", level=reached, text=text)
    else:
        jobs = [j for j in eng.index.jobs.values() if j.stoppable()]
        for job in jobs:
            eng.timeline(job, "budget", level=reached, text=text)
    if reached == "over":  # an idle job too: the turn that crossed it may have ended with its cost
        for job in jobs:
            if job.stoppable() or (owner is not None and job.state is State.IDLE):
                eng.post(job.id, m.Stop(STOP_CALLER + (owner or "day")))


def budgets_over(eng: EngineApi, parent: Job | None) -> list[tuple[str, Budget, Spent]]:
    """The budgets a spawn under ``parent`` counts against: its ancestors' (itself included) and the day's."""
    book = ledger(eng)
    out = [(DAY, Budget(eng.config.budget_daily_usd), book.today)]
    if parent is not None:
        for owner in (parent.id, *eng.index.ancestors(parent.id)):
            if (kept := book.budgets.get(owner)) is not None:
                out.append((f"job {owner}", kept.budget, kept.spent))
    return out


def turn_refusal(eng: EngineApi, job: Job) -> str | None:
    """Why no new turn of ``job`` may start (a budget above it, its own included, or the day's is
    at its cap), or None."""
    return spawn_refusal(budgets_over(eng, job))


def over_caller(eng: EngineApi, job: Job) -> str | None:
    """The stop caller of the budget at its cap that ``job`` is under (``budget:OWNER``, or
    ``budget:day``), or None when none is."""
    book = ledger(eng)
    if level(Budget(eng.config.budget_daily_usd), book.today) == "over":
        return STOP_CALLER + "day"
    for owner in (job.id, *eng.index.ancestors(job.id)):
        if (kept := book.budgets.get(owner)) is not None and level(kept.budget, kept.spent) == "over":
            return STOP_CALLER + owner
    return None


def detach_refusal(eng: EngineApi, job: Job) -> str | None:
    """Why a job may not detach ``job``: leaving its tree would leave the caps of its ancestors'
    budgets (a person may: as with `roost budget`, what a tree spends is theirs to say)."""
    for owner in eng.index.ancestors(job.id):
        if (kept := ledger(eng).budgets.get(owner)) is not None:
            return (f"job {job.id} is under the budget of job {owner} ({kept.budget.words()}); only a person may "
                    f"detach it from there")
    return None


def check_spawn(eng: EngineApi, parent: Job | None) -> None:
    """Refuse a spawn under a budget that is spent, saying which and how much."""
    if (why := spawn_refusal(budgets_over(eng, parent))) is not None:
        raise ProtocolError(ErrorCode.REFUSED, f"spawn {why}")


def budget_args(op: str, usd: Any, tokens: Any) -> tuple[float | None, int | None]:
    """A budget as an operation gives it, checked: dollars finite and >= 0, tokens >= 0."""
    if usd is not None and not (isinstance(usd, (int, float)) and math.isfinite(usd) and usd >= 0):
        raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: a budget in dollars must be a number >= 0, got {usd!r}")
    return (float(usd) if usd is not None else None), tokens


def set_budget(eng: EngineApi, job: Job, usd: float | None, tokens: int | None, spent: Spent | None = None) -> None:
    """Give a job a budget (at spawn, with nothing ``spent``, or set by a person) and set its level to
    what its subtree has spent: a budget raised above the spend is ``ok`` again and acts anew when
    reached. The job's driver options carry it too, for an agent's own cap (Claude Code's)."""
    if usd is None and tokens is None:
        return
    budget = Budget(usd, tokens)
    spent = ledger(eng).spent(job.id) if spent is None else spent
    now = level(budget, spent)
    eng.store.usage.set_budget(job.id, usd, tokens, now)
    ledger(eng).budgets[job.id] = Kept(budget, now, spent)
    job.driver_opts = {**job.driver_opts, "budget_usd": usd, "budget_tokens": tokens}


def on_set_budget(eng: EngineApi, job: Job, msg: m.SetBudget) -> None:
    """``roost budget ID`` (the ``SetBudget`` message, in the job's mailbox): a person sets a job's
    budget live; the figures left out keep their value. Lowered below the spend, it acts at once."""
    old = ledger(eng).budgets.get(job.id)
    usd = msg.usd if msg.usd is not None else (old.budget.usd if old else None)
    tokens = msg.tokens if msg.tokens is not None else (old.budget.tokens if old else None)
    if usd is None and tokens is None:
        msg.fail(ProtocolError(ErrorCode.BAD_ARGS, "budget: give --usd or --tokens (or both)"))
        return
    try:
        usd, tokens = budget_args("budget", usd, tokens)
    except ProtocolError as exc:
        msg.fail(exc)
        return
    with eng.store.transaction():
        set_budget(eng, job, usd, tokens)
        eng.save(job)
        kept = ledger(eng).budgets[job.id]
        eng.timeline(job, "budget", level=kept.level,
                     text=f"budget set to {kept.budget.words()} by a person: {describe(kept.budget, kept.spent, 'it')}")
        if kept.level == "over" and (old is None or old.level != "over"):
            _act(eng, job.id, "over", kept.budget, kept.spent)
    _restart_for_cap(eng, job)
    if kept.level != "over" and old is not None and old.level == "over":  # reports held by the cap go now
        for member in (job.id, *(d.id for d in eng.index.descendants(job.id))):
            eng.post(member, m.Reports())
    msg.answer(budget_row(eng, job.id))


def _restart_for_cap(eng: EngineApi, job: Job) -> None:
    """A worker whose agent caps its own spend with the budget it started with (Claude Code) is
    restarted between turns (the slot's ``restart_for_cap``, done by the job's ``Due``), so the
    new cap reaches the agent; its session goes on."""
    slot = eng.slots.get(job.id)
    if slot is not None and driver_for(eng.config.driver(job.driver).kind).caps_spend:
        slot.restart_for_cap = True
        eng.post(job.id, m.Due())


def budget_row(eng: EngineApi, job_id: str) -> dict[str, Any] | None:
    """A job's budget as ``show`` and ``budget`` give it, or None when it has none."""
    kept = ledger(eng).budgets.get(job_id)
    if kept is None:
        return None
    return {"usd": kept.budget.usd, "tokens": kept.budget.tokens, "level": kept.level,
            "spent_usd": kept.spent.usd, "spent_tokens": kept.spent.tokens}


def show_fields(eng: EngineApi, job_id: str) -> dict[str, Any]:
    """What ``show`` adds to a job's row: its subtree's figures (itself included) and its budget."""
    eng.index.require(job_id)
    return {"subtree_usage": ledger(eng).tree(job_id), "budget": budget_row(eng, job_id)}
