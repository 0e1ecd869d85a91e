"""Retry policies, and the scopes that say how a failure inside them is treated.

A :class:`RetryPolicy` says whether a failure is worth another attempt and how
long to wait before it: exponential backoff with full jitter, capped. The task
layer applies one to every task by default (``DEFAULT_RETRY_POLICY``); the
runtime knows nothing of tasks, so the policy is a plain value that any code can
use (``policy.delay(attempt)``).

The scopes mark an exception as it leaves them, and whoever handles the failure
(a task worker) reads the mark with :func:`failure_mark`:

- ``with retry(max_retries=..., on=(ConnectionError,)):`` a failure of one of
  ``on`` inside is retried under this policy, not the task's;
- ``with optional(KeyError):`` a failure of one of those inside is logged as a
  warning and the code goes on after the block;
- ``with poisonous():`` a failure inside is never retried: it is poison, and a
  task worker dead-letters it at once.

The mark is an attribute set on the exception object, so it crosses from a
worker thread to the event loop with the exception itself.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final, Literal

import attrs

from .._errors import ConfigError
from .._log import log

__all__ = [
    "DEFAULT_RETRY_POLICY",
    "NEVER_RETRIED",
    "POISON",
    "RetryPolicy",
    "failure_mark",
    "optional",
    "poisonous",
    "retry",
]

#: Programming errors: a wrong call, a missing name or attribute, a failed
#: assertion. Another attempt fails the same way, so none is made.
NEVER_RETRIED: Final[tuple[type[BaseException], ...]] = (
    TypeError,
    NameError,
    AttributeError,
    ImportError,
    SyntaxError,
    AssertionError,
    NotImplementedError,
    RecursionError,
    ArithmeticError,
    LookupError,
)
#: The mark :func:`poisonous` leaves (see :func:`failure_mark`).
POISON: Final = "poison"
_MARK: Final = "__actorctl_failure__"
Jitter = Literal["full"] | None


def _exception_types(value: Any) -> tuple[type[BaseException], ...]:
    items = value if isinstance(value, (tuple, list)) else (value,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ConfigError(f"retry policy: {item!r} is not an exception class")
    return tuple(items)


def _non_negative(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ConfigError(f"retry policy: {attribute.name} = {value!r} cannot be negative")


@attrs.frozen
class RetryPolicy:
    """How a failure is retried.

    Attempt ``n`` (0 for the first retry) waits a random time between 0 and
    ``min(interval_max, interval_start + interval_step * (2**n - 1))`` seconds
    (full jitter), or that bound itself with ``jitter=None``.

    Args:
        max_retries: retries after the first run; None: no bound.
        interval_start: the bound of the first retry's delay, in seconds.
        interval_step: how much the bound grows, doubling each retry.
        interval_max: the cap of every delay.
        jitter: ``"full"`` or None.
        on: the exceptions retried (their subclasses too).
        never: the exceptions never retried, even when they are in ``on``.
    """

    max_retries: int | None = attrs.field(default=3)
    interval_start: float = attrs.field(default=1.0, validator=_non_negative)
    interval_step: float = attrs.field(default=1.0, validator=_non_negative)
    interval_max: float = attrs.field(default=60.0, validator=_non_negative)
    jitter: Jitter = attrs.field(default="full")
    on: tuple[type[BaseException], ...] = attrs.field(
        default=(Exception,), converter=_exception_types
    )
    never: tuple[type[BaseException], ...] = attrs.field(
        default=NEVER_RETRIED, converter=_exception_types
    )

    @max_retries.validator
    def _check_max(self, _: Any, value: int | None) -> None:
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ConfigError(f"retry policy: max_retries = {value!r} must be an integer >= 0")

    @jitter.validator
    def _check_jitter(self, _: Any, value: Jitter) -> None:
        if value not in ("full", None):
            raise ConfigError(f"retry policy: jitter = {value!r} must be 'full' or None")

    def bound(self, attempt: int) -> float:
        """The longest delay of retry ``attempt`` (0 for the first)."""
        grown = self.interval_start + self.interval_step * ((1 << min(attempt, 62)) - 1)
        return min(self.interval_max, grown)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The delay of retry ``attempt``: within ``[0, bound(attempt)]``."""
        bound = self.bound(attempt)
        if self.jitter is None:
            return bound
        return float((rng or random).uniform(0.0, bound))

    def retries(self, exc: BaseException) -> bool:
        """Whether ``exc`` is of a kind this policy retries."""
        return isinstance(exc, self.on) and not isinstance(exc, self.never)

    def exhausted(self, retries: int) -> bool:
        """Whether ``retries`` retries use up the budget."""
        return self.max_retries is not None and retries >= self.max_retries

    def replace(self, **changes: Any) -> RetryPolicy:
        """This policy with ``changes`` (None values are ignored)."""
        return attrs.evolve(self, **{k: v for k, v in changes.items() if v is not None})

    # -- the wire form (a per-call override travels in a message header) ----------

    def to_wire(self) -> str:
        """The numbers of the policy as compact JSON (``on`` and ``never`` stay
        with the code: a message cannot name exception classes)."""
        numbers = {
            "max_retries": self.max_retries,
            "interval_start": self.interval_start,
            "interval_step": self.interval_step,
            "interval_max": self.interval_max,
            "jitter": self.jitter,
        }
        return json.dumps(numbers, separators=(",", ":"))

    def with_wire(self, text: object) -> RetryPolicy:
        """This policy with the numbers of a header (:meth:`to_wire`); an
        unreadable header leaves it as it is (and is logged). A message cannot
        make retries unbounded: ``"max_retries": null`` there is ignored (and
        logged), and the bound stays this policy's."""
        try:
            given = json.loads(text) if isinstance(text, str) else None
            if not isinstance(given, Mapping):
                raise ValueError("not a JSON object")
            known = {"max_retries", "interval_start", "interval_step", "interval_max", "jitter"}
            numbers = {k: v for k, v in given.items() if k in known}
            if "max_retries" in numbers and numbers["max_retries"] is None:
                del numbers["max_retries"]
                log(
                    "actorctl:retry:unbounded-ignored",
                    header=str(text)[:200],
                    max_retries=self.max_retries,
                    why="a message cannot lift the bound of its task's retries "
                    '("max_retries": null): the task\'s bound stays',
                )
            return attrs.evolve(self, **numbers)
        except (ValueError, TypeError, ConfigError) as exc:
            log("actorctl:retry:bad-policy", header=str(text)[:200], error=str(exc))
            return self

    @classmethod
    def from_options(cls, options: Mapping[str, Any], base: RetryPolicy) -> RetryPolicy:
        """``base`` with a mapping of its fields (an app's conf, a call's
        ``retry_policy={...}``).

        Raises:
            ConfigError: an unknown field, or a bad value.
        """
        fields = {a.name for a in attrs.fields(cls)}
        unknown = set(options) - fields
        if unknown:
            raise ConfigError(
                f"retry policy: unknown field(s) {sorted(unknown)} (known: {sorted(fields)})"
            )
        return attrs.evolve(base, **options)


DEFAULT_RETRY_POLICY: Final = RetryPolicy()


def failure_mark(exc: BaseException) -> RetryPolicy | str | None:
    """What a scope said of ``exc``: the policy of the innermost :func:`retry`
    it left, :data:`POISON` if it left a :func:`poisonous` scope, or None."""
    mark: RetryPolicy | str | None = getattr(exc, _MARK, None)
    return mark


def _mark(exc: BaseException, mark: RetryPolicy | str) -> None:
    if getattr(exc, _MARK, None) is None:  # the innermost scope decides
        # An exception type with __slots__ cannot be marked: it stays unmarked.
        with contextlib.suppress(AttributeError):
            setattr(exc, _MARK, mark)


@contextmanager
def retry(
    *,
    max_retries: int | None = 3,
    interval_start: float = 1.0,
    interval_step: float = 1.0,
    interval_max: float = 60.0,
    jitter: Jitter = "full",
    on: type[BaseException] | tuple[type[BaseException], ...] = (Exception,),
    never: tuple[type[BaseException], ...] = NEVER_RETRIED,
) -> Iterator[RetryPolicy]:
    """A failure of one of ``on`` inside the block is retried under this
    policy (instead of the task's); programming errors (``never``) are not."""
    policy = RetryPolicy(
        max_retries, interval_start, interval_step, interval_max, jitter, on=on, never=never
    )
    try:
        yield policy
    except BaseException as exc:
        if policy.retries(exc):
            _mark(exc, policy)
        raise


@contextmanager
def optional(*exceptions: type[BaseException]) -> Iterator[None]:
    """A failure of one of ``exceptions`` (any ``Exception`` if none is given)
    inside the block is logged as a warning (``actorctl:task:optional-failed``)
    and the code goes on after the block."""
    kinds = _exception_types(exceptions) if exceptions else (Exception,)
    try:
        yield
    except kinds as exc:
        log(
            "actorctl:task:optional-failed",
            error_type=type(exc).__name__,
            error=str(exc),
            warning="an optional step failed: going on without it",
        )


@contextmanager
def poisonous() -> Iterator[None]:
    """A failure inside the block is never retried: the message is poison
    (a task worker dead-letters it with reason ``poison``)."""
    try:
        yield
    except BaseException as exc:
        _mark(exc, POISON)
        raise
