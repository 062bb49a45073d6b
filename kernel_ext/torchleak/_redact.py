"""Report.redacted(): a report that can travel (a CI artefact, an issue, a chat) without what it
says about the code and the data behind it.

Withheld: tensor shapes and dtypes, source lines (notebook cell text included), absolute paths
(a file under the project becomes relative to it, one under an installed library relative to
its site-packages, any other a hash), and string dictionary keys (a hash each). Kept: verdicts,
rates, sizes, roles, line numbers, function names and the retaining paths' structure, so the
redacted report still says where, why and whether. The structured fields are redacted here;
the sentences the core writes from them (site texts, cause texts, the headline) are written
again by the core from the redacted fields, and the sentences it stores (a path's text, a fix)
have each withheld string replaced by its stand-in.
"""

import copy
import hashlib
import json
import os
import re
import site
import sysconfig

# Where installed code lives: a path under one of these is public (torch/nn/modules/module.py).
_LIBRARY_DIRS = sorted(
    {
        os.path.abspath(p)
        for p in [
            *site.getsitepackages(),
            site.getusersitepackages(),
            sysconfig.get_paths()["stdlib"],
            sysconfig.get_paths()["purelib"],
        ]
        if p
    },
    key=len,
    reverse=True,
)
# A string key as the core labels it: ['k'] or ["k"] (a key that is an object reads otherwise).
_STRING_KEY = re.compile(r"""^\[(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\]$""")
# A shape written into a sentence: "the 64×10 tensors".
_SHAPE_IN_TEXT = re.compile(r"\b\d+(?:\u00d7\d+)+\b")


def _digest(text):
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


class _Redaction:
    def __init__(self, project):
        self.project = os.path.abspath(project)
        self.replaced = {}  # withheld string -> its stand-in, for the stored sentences

    def file(self, path):
        if not isinstance(path, str) or not os.path.isabs(path):
            return path
        for base in (self.project, *_LIBRARY_DIRS):
            if path.startswith(base.rstrip(os.sep) + os.sep):
                stand_in = os.path.relpath(path, base)
                break
        else:
            stand_in = f"<file {_digest(path)}>"
        self.replaced[path] = stand_in
        return stand_in

    def key(self, label):
        stand_in = f"[<key {_digest(label)}>]"
        self.replaced[label] = stand_in
        return stand_in

    def frame(self, frame):
        """A site or a stack frame: its file made relative or hashed, its source line gone."""
        if isinstance(frame, dict):
            frame.pop("source", None)
            if "file" in frame:
                frame["file"] = self.file(frame["file"])

    def sentences(self):
        """The rewrite of a stored sentence, once every withheld string is known: one pass that
        puts each one's stand-in in its place (the longest first where two overlap) and writes
        shapes as <shape>."""
        if not self.replaced:
            pattern = None
        else:
            pattern = re.compile("|".join(re.escape(w) for w in sorted(self.replaced, key=len, reverse=True)))

        def sentence(text):
            if not isinstance(text, str):
                return text
            if pattern is not None:
                text = pattern.sub(lambda m: self.replaced[m.group()], text)
            return _SHAPE_IN_TEXT.sub("<shape>", text)

        return sentence


def redact(data, project=None):
    """A redacted copy of a report's JSON data (the dict Report holds)."""
    out = copy.deepcopy(data)
    r = _Redaction(project or os.getcwd())
    for finding in out.get("findings", []):
        finding["dtype"] = None
        finding["shape"] = None
        r.frame(finding.get("site"))
        r.frame(finding.get("allocated_inside"))
        for frame in finding.get("stack", []):
            r.frame(frame)
        for step in finding.get("path", []):
            if step.get("kind") == "key" and _STRING_KEY.match(step.get("label", "")):
                step["label"] = r.key(step["label"])
            tensor = step.get("tensor")
            if isinstance(tensor, dict):
                tensor.pop("dtype", None)
                tensor.pop("shape", None)
                r.frame(tensor.get("site"))
    for device in out.get("devices", []):
        for spike in device.get("spikes") or []:
            r.frame(spike.get("site"))  # its text is the core's, written again below
    # Every stored sentence, after every withheld string is known.
    sentence = r.sentences()
    for finding in out.get("findings", []):
        finding.pop("fix_code", None)  # the site's own source line, rewritten
        for field in ("path_text", "suggestion"):
            finding[field] = sentence(finding.get(field))
        for step in finding.get("path", []):
            for field in ("label", "note", "type"):
                if field in step:
                    step[field] = sentence(step[field])
        if isinstance(finding.get("holder"), dict):
            finding["holder"]["path_text"] = sentence(finding["holder"].get("path_text"))
    for cause in out.get("causes", []):
        for field in ("keeper", "suggestion"):
            cause[field] = sentence(cause.get(field))
        if isinstance(cause.get("holder"), dict):
            cause["holder"]["path_text"] = sentence(cause["holder"].get("path_text"))
    out["warnings"] = [sentence(w) for w in out.get("warnings", [])]
    summary = out.get("summary", {})
    summary["critical_issues"] = [sentence(c) for c in summary.get("critical_issues", [])]
    for rec in summary.get("recommendations", []):
        rec["text"] = sentence(rec.get("text"))
    oom = out.get("oom")
    if isinstance(oom, dict):
        oom["message"] = sentence(oom.get("message"))
        for entry in oom.get("by_site", []):
            entry["site"] = sentence(entry.get("site"))
        for entry in oom.get("by_holder", []):
            entry["holder"] = sentence(entry.get("holder"))
    # The core writes its sentences again from the redacted fields and checks the result.
    from . import _core

    return json.loads(_core.normalize_report(json.dumps(out)))
