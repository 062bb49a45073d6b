"""torchleak.config: thresholds and the allow-list behind every verdict.

    torchleak.config.set(min_leak_bytes_per_iteration="1MiB", warmup=2)
    torchleak.config.allow("model.kv_cache*", "cache.py:*")   # intentional caches
    torchleak.config.reset()

Values are validated by the C++ core (the same checks as `%leakconfig KEY=VALUE`): an unknown
key or a bad value raises ValueError saying what is accepted. The settings, their names and
types, are one table in the core (`_core.AnalysisConfig.settings()`).
"""

from . import _core

# What each setting's text reads back as in Python, by the core's setting type.
_READ_AS = {"size": int, "count": int, "fraction": float}
_TYPES = {name: kind for name, kind, _ in _core.AnalysisConfig.settings()}


class Config:
    def __init__(self):
        self._cpp = _core.AnalysisConfig()

    def set(self, **settings):
        """Set thresholds by name; sizes accept units ("1MiB", "100MB"). All or nothing: every
        value is validated before any is kept."""
        trial = self._cpp.copy()
        for key, value in settings.items():
            if _TYPES.get(key) == "patterns":
                patterns = [value] if isinstance(value, str) else list(value)
                trial.set(key, "")
                for pattern in patterns:
                    trial.set(key, str(pattern))
                continue
            if isinstance(value, bool) or value is None:
                raise ValueError(f"{key} needs a number or a size, got {value!r}")
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
            raise AttributeError(f"torchleak.config has no setting {key!r} "
                                 f"(settings: {', '.join(_TYPES)})")

    def allow(self, *patterns):
        """Add allow-list globs matched against a finding's site (file:line), function,
        path or holder: its verdict becomes "allowed"."""
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern.strip():
                raise ValueError(f"an allow pattern is a non-empty string, got {pattern!r}")
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
