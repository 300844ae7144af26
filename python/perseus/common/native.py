"""The native extension (perseus._core), loaded on first use so that `import perseus` stays
cheap. Every module of common/ that calls into the core reaches it through core()."""

_core_module = None


def core():
    """perseus._core. Cached: every collective calls this, and a function-level import costs
    about a microsecond each time."""
    global _core_module
    if _core_module is None:
        from perseus import _core
        _core_module = _core
    return _core_module
