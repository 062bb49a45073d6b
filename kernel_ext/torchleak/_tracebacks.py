"""Tracebacks as the user's code raised them: the frames of torchleak's own machinery that ran
it (the CLI's exec, a magic's loop) are left out, as if the code had failed on its own."""


def code_entry(tb, code):
    """The traceback from the first entry that runs `code`, or None when none does."""
    entry = tb
    while entry is not None and entry.tb_frame.f_code is not code:
        entry = entry.tb_next
    return entry


def from_code(tb, code):
    """The traceback from the first entry that runs `code` (or all of it, when none does)."""
    return code_entry(tb, code) or tb


def show_from_code(shell, failure, code):
    """Have IPython show `failure`, about to propagate out of a cell magic, from `code`'s
    frame on. The cell's own outer frame (``get_ipython().run_cell_magic(...)``) is in the
    traceback of anything that leaves a cell magic; only IPython's display can leave it out.
    A custom exception handler does it for this one exception and unregisters itself at the
    first exception it sees, whichever. A shell with handlers of its own (someone else's) or
    without IPython's traceback machinery (another kernel) is left as it is. The handler keeps
    the exception's id, not the exception (exceptions take no weak references): the tool keeps
    no frame, so no tensor, alive."""
    import sys

    if (
        getattr(shell, "custom_exceptions", None) != ()
        or not hasattr(shell, "_showtraceback")
        or not hasattr(shell, "InteractiveTB")
        or not hasattr(shell, "set_custom_exc")
    ):
        return
    ours = id(failure)

    def handler(self, etype, value, tb, tb_offset=None):
        self.set_custom_exc((), None)
        try:
            if id(value) != ours:
                raise LookupError("not the magic's failure")
            # A failure raised outside the cell's code (a Stop taken between iterations) is
            # shown with no frames: every one of them would be the magic's own.
            tb = code_entry(tb, code)
            sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb
            if sys.version_info >= (3, 12):
                sys.last_exc = value
            self._showtraceback(etype, value, self.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=0))
        except Exception:  # noqa: BLE001 - whatever went wrong, IPython shows it as it would
            # IPython's own display of it, exactly as without the handler.
            self.showtraceback((etype, value, tb), running_compiled_code=True)
        return None

    shell.set_custom_exc((BaseException,), handler)
