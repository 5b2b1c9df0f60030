"""A model from the user's file, unpickled in a fresh process that never saw the file.

In-process, models/user.py's cache of loaded builders and the module left in sys.modules
answer for a lost `cloudpickle.register_pickle_by_value`; a worker has neither. Here the
builder's bytes are loaded by a new Python (as a worker loads them: `from_bytes`) after the
file is deleted, and the network it builds must be the driver's, weight for weight.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from dask_dane.models.user import call_builder, resolve, to_bytes

# A helper and a constant at module level: both must travel with the builder.
MODEL_FILE = """
from torch import nn

HIDDEN = 5

def _head(width, num_classes):
    return nn.Linear(width, num_classes)

def build(in_channels, num_classes):
    body = nn.Linear(in_channels * 4, HIDDEN)
    return nn.Sequential(nn.Flatten(), body, _head(HIDDEN, num_classes))
"""

WORKER = textwrap.dedent("""
    import sys
    import torch
    from dask_dane.models.user import call_builder, from_bytes
    builder = from_bytes(open(sys.argv[1], "rb").read(), "vanishing_model.py:build")
    torch.manual_seed(0)
    model = call_builder(builder, sample_shape=(2, 2, 2), num_classes=3, name="build")
    torch.save({k: v for k, v in model.state_dict().items()}, sys.argv[2])
""")


@pytest.mark.cluster  # starts a process
def test_a_file_model_unpickles_in_a_fresh_process_after_the_file_is_gone(tmp_path):
    source = tmp_path / "vanishing_model.py"
    source.write_text(MODEL_FILE)
    builder = resolve(f"{source}:build")
    (tmp_path / "builder.pkl").write_bytes(to_bytes(builder))
    torch.manual_seed(0)
    expected = call_builder(builder, sample_shape=(2, 2, 2), num_classes=3, name="build")
    source.unlink()  # the worker never saw it

    done = subprocess.run(
        [sys.executable, "-c", WORKER, "builder.pkl", "state.pt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr[-2000:]
    state = torch.load(tmp_path / "state.pt")
    assert list(state) == list(expected.state_dict())
    assert [tuple(v.shape) for v in state.values()] == [(5, 8), (5,), (3, 5), (3,)]
    for name, value in expected.state_dict().items():
        assert torch.equal(state[name], value), name
