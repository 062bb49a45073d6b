"""Named roots for the retaining-path walk: the names a user recognises.

Collecting them is glue (it reads module dicts and frames, and runs no user code); the walk
itself is C++ (`torchleak._core`). Order matters: the walk is breadth first and the first root
to reach a tensor names its path, so the user's own names come before notebook machinery.
"""

import functools
import os
import sys
import threading
import types
import weakref

_TOOL_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# A module's dict read through ModuleType's own slot: a lazy module's __getattribute__ (which
# would import it) or a proxy's never runs.
_module_dict = types.ModuleType.__dict__["__dict__"].__get__
_TracebackType = types.TracebackType


def _is_module(value):
    # An exact type test: `type(value).__name__` asks the metaclass, which may be user code.
    return type(value) is types.ModuleType


def _skip_name(name):
    return name.startswith("__") and name.endswith("__")


def _ipython_shell():
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        return ipython.get_ipython()
    except Exception:  # noqa: BLE001 - no shell, or a broken one: no notebook roots
        return None


# path -> kind, for the prefixes it was computed with: realpath() of ~1,500 module files was
# most of a report's fixed cost, and a module's file does not change class while it is loaded.
_kind_cache = {}
_kind_cache_prefixes = None


def _caches_for(library_prefixes, package_prefixes):
    """Empties the kind caches (_kind_cache, _module_kinds) when the prefixes changed."""
    global _kind_cache_prefixes
    prefixes = (tuple(library_prefixes), tuple(package_prefixes))
    if prefixes != _kind_cache_prefixes:
        _kind_cache.clear()
        _module_kinds.clear()
        _kind_cache_prefixes = prefixes


def _file_kind(path, library_prefixes, package_prefixes):
    """ "user", "package" (an installed third-party package) or "library" (torch, the standard
    library, torchleak, code with no file): the frame rule's classes, longest prefix winning."""
    _caches_for(library_prefixes, package_prefixes)
    kind = _kind_cache.get(path)
    if kind is None:
        kind = _kind_cache[path] = _classify_file(path, library_prefixes, package_prefixes)
    return kind


# A class's MRO as the type's own slot holds it. `type(x).__mro__` runs a metaclass's
# `__mro__` property or `__getattribute__`: user code, and one that raised cost the whole report
# (reproducer U5, #64). type's own descriptor reads the slot.
_TYPE_MRO = type.__dict__["__mro__"]


def _mro(cls):
    try:
        return _TYPE_MRO.__get__(cls, type)
    except Exception:  # noqa: BLE001 - not a class after all: nothing is found in it
        return ()


# sys.modules' entries by name: (the module, weakly; its kind). A watched cell collects roots
# every run, and telling ~1,200 modules apart took most of it; a module's kind does not change
# while it is loaded. Nothing here keeps a module, or its globals' tensors, alive. Emptied
# with _kind_cache when the prefixes change (_caches_for).
_module_kinds = {}


def _module_kind(modname, module, library_prefixes, package_prefixes):
    """("user" | "package" | None, namespace) for a sys.modules entry (None: not walked)."""
    _caches_for(library_prefixes, package_prefixes)
    cached = _module_kinds.get(modname)
    if cached is not None and cached[0]() is module:
        return cached[1], (_module_dict(module) if cached[1] else None)
    kind, namespace = None, None
    if (
        module is not None
        and modname != "__main__"
        and not modname.startswith("torchleak")
        and types.ModuleType in _mro(type(module))
    ):  # else a proxy: reading it runs code
        namespace = _module_dict(module)
        path = namespace.get("__file__") if type(namespace) is dict else None
        if isinstance(path, str):
            kind = _file_kind(path, library_prefixes, package_prefixes)
            kind = kind if kind in ("user", "package") else None
    try:
        _module_kinds[modname] = (weakref.ref(module), kind)
    except TypeError:
        pass  # an entry that takes no weak reference is classified each time
    return kind, namespace


def _classify_file(path, library_prefixes, package_prefixes):
    if not path or path.startswith("<"):
        return "user" if path.startswith(("<ipython-input", "<stdin>")) else "library"
    # The file's real path only when its own names no prefix: realpath is a system call per
    # component, and a first report classifies every loaded module (~1,100: 30 ms of it).
    return (
        _kind_by_prefix(path, library_prefixes, package_prefixes)
        or _kind_by_prefix(os.path.realpath(path), library_prefixes, package_prefixes)
        or "user"
    )


def _kind_by_prefix(path, library_prefixes, package_prefixes):
    """ "library" or "package" by the longest prefix `path` starts with; None for neither."""
    library = max((len(p) for p in library_prefixes if path.startswith(p)), default=0)
    package = max((len(p) for p in package_prefixes if path.startswith(p)), default=0)
    if library > package:
        return "library"
    return "package" if package else None


def _frame_label(frame):
    code = frame.f_code
    return f"{code.co_name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})"


def _tracebacks(tb):
    while tb is not None and type(tb) is _TracebackType:
        yield tb
        tb = tb.tb_next


def _add_failed_frame_roots(roots, keepers):
    """Each failed frame's locals, named `<last exception> frame f: local 'x'`, noted with what
    keeps the frame. keepers: the tracebacks that hold it, as (traceback entry, [keeper names])
    per frame in order."""
    for t, names in keepers:
        frame = t.tb_frame
        code = frame.f_code
        if code.co_filename.startswith(_TOOL_DIR) or frame.f_globals is frame.f_locals:
            continue
        for name, value in list(frame.f_locals.items()):
            if _is_module(value):
                continue
            roots.append(
                (
                    f"<last exception> frame {code.co_name}: local '{name}'",
                    "frame",
                    f"kept by {' and '.join(names)} ({os.path.basename(code.co_filename)}:{t.tb_lineno})",
                    value,
                )
            )


def given(mapping):
    """Roots the caller names ({name: object}, the `roots=` of report() and check()), as root
    tuples: first in the walk, so their names beat every global and frame."""
    if mapping is None:
        return []
    if not isinstance(mapping, dict):
        raise TypeError(f"roots must be a dict of name -> object, got {type(mapping).__name__}")
    roots = []
    for name, value in mapping.items():
        if type(name) is not str or not name:
            raise TypeError(f"roots: every name must be a non-empty str, got {name!r:.60}")
        roots.append((name, "root", "named by the caller (roots=...)", value))
    return roots


_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08
_function_code = types.FunctionType.__dict__["__code__"].__get__
_function_name = types.FunctionType.__dict__["__name__"].__get__


def _as_given(args, kwargs):
    """check()'s arguments by position and key, as it took them: `args[0]`, `kwargs['k']`."""
    return [(f"args[{i}]", value) for i, value in enumerate(args)] + [
        (f"kwargs[{key!r}]", value) for key, value in kwargs.items()
    ]


def _parameters(fn, args, kwargs):
    """(the function's name or None, [(name, value)]) for the arguments check() passes on, as
    the function it calls binds them, read from its code object (inspect.signature would ask
    the callable for __signature__ and __wrapped__: user code). A bound method's object is
    its first parameter; a partial's own arguments bind first and are not roots (a partial
    the caller named reaches them by its name, `callback.args[0]`); any other callable's
    arguments are `args[i]` and `kwargs['k']`, as check() took them."""
    bound = []
    skipped = 0  # leading positional parameters taken by a partial's own arguments
    taken = set()  # keywords a partial gave
    if type(fn) is types.MethodType:
        fn, args = fn.__func__, (fn.__self__, *args)
    while type(fn) is functools.partial:
        skipped += len(fn.args)
        taken.update(fn.keywords)
        fn = fn.func
    if type(fn) is not types.FunctionType:
        return None, _as_given(args, kwargs)
    code = _function_code(fn)
    positional = [name for name in code.co_varnames[: code.co_argcount] if name not in taken]
    keyword = set(code.co_varnames[code.co_posonlyargcount : code.co_argcount + code.co_kwonlyargcount])
    after = code.co_argcount + code.co_kwonlyargcount
    var_args = code.co_varnames[after] if code.co_flags & _CO_VARARGS else None
    var_kwargs = code.co_varnames[after + (var_args is not None)] if code.co_flags & _CO_VARKEYWORDS else None
    for i, value in enumerate(args, start=skipped):
        if i < len(positional):
            bound.append((positional[i], value))
        else:
            bound.append((f"{var_args or 'args'}[{i - len(positional)}]", value))
    for key, value in kwargs.items():
        if key in keyword:
            bound.append((key, value))
        else:
            bound.append((f"{var_kwargs or 'kwargs'}[{key!r}]", value))
    return _function_name(fn), bound


def arguments(fn, args, kwargs):
    """Roots for the arguments check() passes to fn, called by fn's parameters (`state`): an
    object made inline, `check(step, make_state())`, is named nowhere else, and was reached
    through check()'s own closure as `<cell outside the named roots>`. Tried after every other
    root: a name the caller gives, a global or a frame's local names an object better than
    the parameter it is passed to (`trainer.history`, not `self.history`)."""
    try:
        where, bound = _parameters(fn, args, kwargs)
    except Exception:  # noqa: BLE001 - an odd callable: its arguments by position, as given
        where, bound = None, _as_given(args, kwargs)
    note = f"an argument check() passes to {where}()" if where else "an argument check() passes on"
    return [(name, "root", note, value) for name, value in bound]


# The note of the output cache's roots: the core reads `_`, `__` and `___` as the cache only
# with it (retention.h, kOutputCacheNote).
OUTPUT_CACHE = "IPython output cache"


def _is_displayed_output(shell, name, value):
    """Whether the notebook's `_` (or `__`, `___`) is what IPython's displayhook put there, the
    output of a cell, rather than a value the user's own code assigned to that name. IPython's
    own test (DisplayHook.update_user_ns): the displayhook pushes its value into the hidden
    namespace too, so a name that differs from its hidden copy was assigned by the user."""
    hidden = getattr(shell, "user_ns_hidden", None)
    if type(hidden) is dict and name in hidden:
        return hidden[name] is value
    hook = getattr(shell, "displayhook", None)
    return hook is None or getattr(hook, name, value) is value


def _hidden_output_cache(shell):
    """IPython keeps `_`, `__` and `___` in its hidden namespace too, and `%reset -f out`
    clears only the user's: the copies it leaves keep the last three outputs. Roots of their
    own, named as the code that reaches them (the core reads them as the output cache)."""
    hidden = getattr(shell, "user_ns_hidden", None)
    if type(hidden) is not dict:
        return []
    roots = []
    for name in ("_", "__", "___"):
        value = hidden.get(name)
        if value is None or isinstance(value, str) or value is shell.user_ns.get(name):
            continue
        roots.append(
            (f"get_ipython().user_ns_hidden[{name!r}]", "root", "IPython's hidden copy of the output cache", value)
        )
    return roots


def collect(library_prefixes, package_prefixes):
    roots = []
    seen_namespaces = set()
    shell = _ipython_shell()
    main = sys.modules.get("__main__")

    def add_namespace(prefix, namespace, *, notebook=False):
        """A module's globals (one root each), or the notebook's, with its machinery last."""
        if id(namespace) in seen_namespaces:
            return
        seen_namespaces.add(id(namespace))
        if not notebook:
            # One root per global, expanded by the bindings (dunders and modules left out).
            roots.append((prefix, "namespace", "", namespace))
            return
        late = []
        for name, value in list(namespace.items()):
            if type(name) is not str or _skip_name(name) or _is_module(value):
                continue
            if name in ("In", "_ih", "_oh", "_dh", "exit", "quit", "get_ipython"):
                continue
            # Notebook machinery last, so `losses` beats `Out[3]` for the same tensor. Each
            # output is its own root, named as the user sees it; `_3` and `_` are aliases.
            if name == "Out" and isinstance(value, dict):
                late[:0] = [(f"Out[{k}]", "root", OUTPUT_CACHE, v) for k, v in list(value.items())]
            elif name in ("_", "__", "___") and not _is_displayed_output(shell, name, value):
                roots.append((name, "root", "", value))  # the user's own: `xb, _ = get_batch()`
            elif name.startswith("_"):
                if not name[1:].isdigit():
                    late.append((name, "root", OUTPUT_CACHE, value))
            else:
                roots.append((name, "root", "", value))
        roots.extend(late)

    if shell is not None:
        add_namespace("", shell.user_ns, notebook=True)
        roots.extend(_hidden_output_cache(shell))
    if main is not None:
        add_namespace("", vars(main))
    # Globals of the user's own modules; installed packages' modules are roots too, but last
    # (below), so a user's name wins and a cache inside a library still reads
    # `somepkg.models.detector.Detector.make_grid` rather than "outside the named roots".
    package_modules = []
    for modname, module in list(sys.modules.items()):
        kind, namespace = _module_kind(modname, module, library_prefixes, package_prefixes)
        if kind == "package":
            package_modules.append((modname, namespace))
        elif kind == "user":
            add_namespace(f"{modname}.", namespace)

    # Locals of live frames in user code, innermost last (outer frames name things first).
    current = threading.get_ident()
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, top in sys._current_frames().items():
        chain = []
        frame = top
        while frame is not None:
            chain.append(frame)
            frame = frame.f_back
        for frame in reversed(chain):
            path = frame.f_code.co_filename
            if path.startswith(_TOOL_DIR) or _file_kind(path, library_prefixes, package_prefixes) != "user":
                continue
            if frame.f_globals is frame.f_locals:
                continue  # module level: already a namespace root
            where = _frame_label(frame)
            if ident != current:
                where += f" in thread {names.get(ident, ident)!r}"
            for name, value in list(frame.f_locals.items()):
                if _is_module(value):
                    continue
                roots.append((name, "frame", f"local '{name}' in {where}", value))
        del chain, frame
    # This very frame is among the current thread's: a reference to it left in a local is a
    # cycle (frame -> local -> frame) that would keep `roots`, and every tensor in it, alive
    # until the next garbage collection.
    top = value = None

    # The last exception keeps its traceback, and with it every failed frame's locals. IPython
    # keeps the traceback a second time (InteractiveTB.tb, set when it printed it): clearing
    # sys.last_* alone frees nothing there, so its frames are roots of their own.
    exc = sys.__dict__.get("last_exc") or sys.__dict__.get("last_value")
    tb = sys.__dict__.get("last_traceback")
    if tb is None and exc is not None:
        tb = exc.__traceback__
    printer = getattr(shell, "InteractiveTB", None) if shell is not None else None
    printer_tb = vars(printer).get("tb") if hasattr(printer, "__dict__") else None
    keepers = {}  # id(frame) -> (its first traceback entry, what keeps it)
    for keeper, chain in (("sys.last_traceback", tb), ("IPython's InteractiveTB.tb", printer_tb)):
        for t in _tracebacks(chain):
            names = keepers.setdefault(id(t.tb_frame), (t, []))[1]
            if keeper not in names:
                names.append(keeper)
    _add_failed_frame_roots(roots, keepers.values())
    if exc is not None:
        roots.append(("<last exception>", "root", "sys.last_value", exc))
    for modname, namespace in package_modules:
        add_namespace(f"{modname}.", namespace)
    # Owners in torch's C++ that torch lets us see, after every Python name: what these keep is
    # otherwise "held only from C++".
    jit_state = sys.modules.get("torch.jit._state")
    unit = getattr(jit_state, "_python_cu", None) if jit_state is not None else None
    if unit is not None:
        roots.append(
            (
                "torch.jit._state._python_cu",
                "root",
                "TorchScript's global compilation unit: every function torch.jit.trace or "
                "torch.jit.script compiles (a traced module's methods too) stays in it, "
                "with its constants, until the process ends",
                unit,
            )
        )
    return roots


def _class_name(cls):
    """A class's own name, read from type's slot: a metaclass's __name__ property is user code."""
    try:
        return type.__dict__["__name__"].__get__(cls, type)
    except Exception:  # noqa: BLE001
        return "?"


def parameter_owners(roots, limit=100_000):
    """(parameter, "model[7] (Linear)", "model[7].weight") for every parameter of the
    nn.Modules among the named roots (not module namespaces: the user's own names), read from
    the modules' own `_modules` and `_parameters` dicts so no user code runs. The walk then says
    which module made an autograd node on a path, and names a dict entry keyed by a parameter
    (optimizer.state) by the parameter's path."""
    module_type = getattr(sys.modules.get("torch.nn.modules.module"), "Module", None)
    if module_type is None:
        return []
    owners, seen = [], set()
    stack = [
        (label, value)
        for label, kind, _note, value in roots
        if kind in ("root", "frame") and module_type in _mro(type(value))
    ]
    # A script's own globals (__main__'s namespace, prefix ""), not the modules' namespaces:
    # library globals would cost a walk of every model a package keeps.
    for prefix, kind, _note, namespace in roots:
        if kind == "namespace" and prefix == "" and type(namespace) is dict:
            stack.extend(
                (name, value)
                for name, value in list(namespace.items())
                if type(name) is str and module_type in _mro(type(value))
            )
    # torch.compile's wrapper (`cmodel = torch.compile(model)`) holds the user's module as
    # `_orig_mod`: walked last, so a module the user also names is `model[0]`, not
    # `cmodel._orig_mod[0]` (the stack is popped from its end).
    compiled = getattr(sys.modules.get("torch._dynamo.eval_frame"), "OptimizedModule", None)
    if compiled is not None:
        stack.sort(key=lambda entry: compiled not in _mro(type(entry[1])))
    while stack and len(seen) < limit:
        label, module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        state = getattr(module, "__dict__", None)
        if type(state) is not dict:
            continue
        described = f"{label} ({_class_name(type(module))})"
        parameters = state.get("_parameters")
        if type(parameters) is dict:
            owners.extend(
                (p, described, f"{label}.{name}" if str(name).isidentifier() else f"{label}[{name!r}]")
                for name, p in parameters.items()
                if p is not None
            )
        children = state.get("_modules")
        if type(children) is dict:
            for name, child in children.items():
                if isinstance(name, str) and child is not None and module_type in _mro(type(child)):
                    stack.append((f"{label}[{name}]" if name.isdigit() else f"{label}.{name}", child))
    return owners
