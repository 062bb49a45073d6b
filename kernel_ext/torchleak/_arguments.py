"""The one check of the options that track(), check(), watch() and the framework callbacks share.

Every option is checked when the call is made, before anything runs: a value the core cannot
take must not fail hours later, when the report is built. Messages show a value only as
``brief()`` words it, never a user object's ``__repr__``.
"""

from ._config import MAX_BYTES, brief, checked_int

BOUNDARIES = ("auto", "explicit", "optimizer_step", "repeat", "cell")
MAX_GATHER_SECONDS = 86400


def _warmup(value):
    if value is not None:
        checked_int("warmup", value)


def _boundary(value):
    if not isinstance(value, str) or value not in BOUNDARIES:
        raise ValueError(f"boundary must be one of {', '.join(BOUNDARIES)}; got {brief(value)}")


def _gather_timeout(value):
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_GATHER_SECONDS
    ):
        raise ValueError(
            f"gather_timeout must be seconds between 0 and {MAX_GATHER_SECONDS} or None, got {brief(value)}"
        )


def _callback(name):
    def check(value):
        if value is not None and not callable(value):
            raise TypeError(f"{name} must be callable, got {type(value).__name__}")

    return check


def _check_every(value):
    if value is not None and (type(value) is not int or value < 1):
        raise ValueError(f"check_every must be an int >= 1 or None, got {brief(value)}")


def _budget(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"budget must be a fraction of the run's time in (0, 1], got {brief(value)}")


_CHECKS = {
    "warmup": _warmup,
    "min_bytes": lambda v: checked_int("min_bytes", v, maximum=MAX_BYTES),
    "sample_bytes": lambda v: checked_int("sample_bytes", v, maximum=MAX_BYTES),
    "every": lambda v: checked_int("every", v, minimum=1),
    "iterations": lambda v: checked_int("iterations", v, minimum=1),
    "boundary": _boundary,
    "gather_timeout": _gather_timeout,
    "on_leak": _callback("on_leak"),
    "on_withdrawn": _callback("on_withdrawn"),
    "check_every": _check_every,
    "budget": _budget,
}


def check_options(**options):
    """Checks each option given, by its name; raises ValueError (TypeError for a callback that
    is not callable) naming the first bad one."""
    for name, value in options.items():
        _CHECKS[name](value)
