"""torchleak.config: thresholds and the allow-list behind every verdict.

    torchleak.config.set(min_leak_bytes_per_iteration="1MiB", warmup=2)
    torchleak.config.allow("model.kv_cache*", "cache.py:*")   # intentional caches
    torchleak.config.reset()

Values are validated by the C++ core (the same checks as `%leakconfig KEY=VALUE`): an unknown
key or a bad value raises ValueError saying what is accepted. The settings, their names and
types, are one table in the core (`_core.AnalysisConfig.settings()`).
"""

from . import _core

# The largest values the core takes: iteration counts are C ints, sizes int64 where signed.
MAX_COUNT = 2**31 - 1
MAX_BYTES = 2**63 - 1


def checked_int(name, value, minimum=0, maximum=MAX_COUNT):
    """`value` if it is an int in [minimum, maximum]; else a ValueError that shows the value
    only when it is a number (never a user object's __repr__, which may be anything)."""
    if type(value) is not int or not minimum <= value <= maximum:
        raise ValueError(f"{name} must be an int between {minimum:,} and {maximum:,}, got {brief(value)}")
    return value


def brief(value):
    """A short, safe description of an argument for an error message."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 128 else f"an int of {value.bit_length()} bits"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 80 else f"a string of {len(value):,} characters"
    return f"a {type(value).__name__}"


# What each setting's text reads back as in Python, by the core's setting type.
_READ_AS = {"size": int, "count": int, "fraction": float}
_TYPES = {name: kind for name, kind, _ in _core.AnalysisConfig.settings()}


def _check_pattern(pattern):
    if not isinstance(pattern, str) or not pattern.strip():
        raise ValueError(f"an allow pattern is a non-empty string, got {brief(pattern)}")


class Config:
    def __init__(self):
        self._cpp = _core.AnalysisConfig()

    def set(self, **settings):
        """Set thresholds by name; sizes accept units ("1MiB", "100MB"). All or nothing: every
        value is validated before any is kept."""
        trial = self._cpp.copy()
        for key, value in settings.items():
            if _TYPES.get(key) == "patterns":
                patterns = [value] if isinstance(value, str) else value
                if not isinstance(patterns, (list, tuple)):
                    raise ValueError(f"{key} needs a pattern or a list of patterns, got {brief(value)}")
                trial.set(key, "")
                for pattern in patterns:
                    _check_pattern(pattern)
                    trial.set(key, pattern)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise ValueError(f"{key} needs a number or a size, got {brief(value)}")
            if isinstance(value, float) and _TYPES.get(key) == "size" and value.is_integer():
                value = f"{value:.0f}"  # 1e19 is "1e+19" as str(): say it in digits
            trial.set(key, str(value))
        object.__setattr__(self, "_cpp", trial)
        return self

    def __setattr__(self, key, value):
        """`torchleak.config.warmup = 2` is `set(warmup=2)`: validated now, not when a report
        later reads it."""
        if key.startswith("_"):
            object.__setattr__(self, key, value)
        elif key in _TYPES:
            self.set(**{key: value})
        else:
            raise AttributeError(f"torchleak.config has no setting {key!r} (settings: {', '.join(_TYPES)})")

    def allow(self, *patterns):
        """Add allow-list globs matched against a finding's site (file:line), function,
        path or holder: its verdict becomes "allowed"."""
        for pattern in patterns:
            _check_pattern(pattern)
        for pattern in patterns:
            self._cpp.set("allow", pattern)
        return self

    def set_text(self, pairs):
        """Apply ``(key, value-text)`` pairs, as `%leakconfig KEY=VALUE` gives them, all or
        nothing: every value is validated before any is kept. ``allow=PATTERN`` adds a pattern,
        ``allow=`` empties the allow-list."""
        trial = self._cpp.copy()
        for key, value in pairs:
            trial.set(key, value)
        object.__setattr__(self, "_cpp", trial)
        return self

    def reset(self):
        self._cpp = _core.AnalysisConfig()
        return self

    def get(self, key):
        text = self._cpp.get(key)  # raises ValueError naming the known keys
        if _TYPES[key] == "patterns":
            return list(self._cpp.allow)
        return _READ_AS[_TYPES[key]](text)

    def __getattr__(self, key):
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self.get(key)
        except ValueError as exc:
            raise AttributeError(str(exc)) from None

    def to_dict(self):
        return {key: self.get(key) for key in _TYPES}

    def snapshot(self):
        """A copy for one report, so later changes do not affect it."""
        return self._cpp.copy()

    def __repr__(self):
        body = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"torchleak.config({body})"


config = Config()
