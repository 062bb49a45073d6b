"""Nothing in this tier slows `import torchleak`: the frameworks load only when their
integration module is imported."""

import subprocess
import sys


def fresh_python(code):
    """What `code` prints in a new interpreter."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_import_torchleak_imports_no_framework():
    code = (
        "import sys, torchleak; "
        "print(*sorted(m for m in ('transformers', 'lightning', 'pytest', 'accelerate', "
        "'torchleak.integrations', 'pytest_torchleak') if m in sys.modules))"
    )
    assert fresh_python(code) == []


def test_each_integration_is_a_module_of_its_own():
    # (lightning itself may import transformers; the other integration must stay unloaded)
    code = (
        "import sys; import torchleak.integrations.lightning; "
        "print('torchleak.integrations.huggingface' in sys.modules, "
        "'lightning' in sys.modules)"
    )
    assert fresh_python(code) == ["False", "True"]
