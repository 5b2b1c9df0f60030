"""Models: output shapes, parameter counts, flat-vector evaluation and shape checks."""

from __future__ import annotations

import pytest
import torch

from dask_dane.models.flat import flatten_parameters, forward_flat, unflatten
from dask_dane.models.registry import MODELS, ModelSpec, build_model, check_model_fits

# Parameter counts worked out by hand from each architecture (weights + biases):
PARAMETER_COUNTS = {
    # conv 1->32 5x5: 832; conv 32->64 5x5: 51,264; dense 64*7*7->128: 401,536; 128->10: 1,290
    ("lenet", (1, 28, 28)): 832 + 51_264 + 401_536 + 1_290,
    # conv 1->32 3x3: 320; 32->64: 18,496; 64->80: 46,160; dense 80*3*3->32: 23,072; 32->10: 330
    ("compact-cnn", (1, 28, 28)): 320 + 18_496 + 46_160 + 23_072 + 330,
    # conv 1->25 k5: 150; two conv 25->25 k3: 1,900 each; lengths 40->19->10->5: 125*10+10
    ("cnn1d", (1, 40)): 150 + 1_900 + 1_900 + 1_260,
    # stem 3*16*9 + GN 32; blocks 16->16, 16->32 (+1x1), 32->64 (+1x1) incl. GN; head 64*10+10
    ("resnet8", (3, 32, 32)): (432 + 32) + 4_672 + 14_528 + 57_728 + 650,
    # conv 1->16 3x3: 160; conv 16->32 3x3: 4,640; dense 512->64: 32,832; 64->10: 650
    ("small-cnn", (1, 8, 8)): 160 + 4_640 + 32_832 + 650,
    # dense 40->64: 2,624; 64->10: 650
    ("mlp", (1, 40)): 2_624 + 650,
}


def _model(name: str, shape: tuple[int, ...], num_classes: int = 10) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ModelSpec(name=name, sample_shape=shape, num_classes=num_classes))


@pytest.mark.parametrize(("name", "shape"), list(PARAMETER_COUNTS))
def test_forward_shape_parameter_count_and_no_state_outside_the_weights(name, shape):
    model = _model(name, shape)
    x = torch.randn(5, *shape)

    out = model(x)

    assert out.shape == (5, 10)
    assert sum(p.numel() for p in model.parameters()) == PARAMETER_COUNTS[(name, shape)]
    # DANE averages flat weight vectors only: a buffer (BatchNorm statistics) would be lost.
    assert list(model.buffers()) == []
    torch.testing.assert_close(forward_flat(model, flatten_parameters(model), x), out)


def test_the_gradient_on_the_flat_weights_is_the_module_s_and_comes_from_one_split():
    model = build_model(ModelSpec(name="resnet8", sample_shape=(1, 8, 8), num_classes=10))
    x, y = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])
    torch.nn.functional.cross_entropy(model(x), y).backward()
    w = flatten_parameters(model).requires_grad_(True)

    torch.nn.functional.cross_entropy(forward_flat(model, w, x), y).backward()

    assert torch.equal(w.grad, torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    # One backward node hands every parameter its part: a slice a parameter would make a
    # gradient the size of the whole vector for each (18x the step at 64 tensors).
    views = unflatten(model, w).values()
    nodes = {view.grad_fn.next_functions[0][0] for view in views}
    assert len(views) > 20 and len(nodes) == 1
    assert type(nodes.pop()).__name__.startswith("SplitWithSizesBackward")


@pytest.mark.parametrize(("name", "shape"), list(PARAMETER_COUNTS))
def test_each_sample_is_predicted_alone(name, shape):
    # Per-sample normalisation only (GroupNorm, not BatchNorm): a row's output does not depend
    # on the rest of its batch, so minibatch size cannot change the function being optimised.
    model = _model(name, shape)
    x = torch.randn(4, *shape)

    torch.testing.assert_close(model(x[:1]), model(x)[:1])


@pytest.mark.parametrize("shape", [(1, 8, 8), (3, 13, 17), (2, 64, 48)])
def test_resnet8_takes_images_of_any_size_from_8x8(shape):
    model = _model("resnet8", shape, num_classes=7)

    assert model(torch.randn(2, *shape)).shape == (2, 7)


def test_cnn1d_matches_the_mnist1d_reference_layout():
    model = _model("cnn1d", (1, 40))
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv1d)]

    assert [(c.out_channels, c.kernel_size[0], c.stride[0], c.padding[0]) for c in convs] == [
        (25, 5, 2, 1),
        (25, 3, 2, 1),
        (25, 3, 2, 1),
    ]
    assert model[-1].in_features == 125  # the reference's linear_in for 40-sample signals


def test_models_build_on_the_meta_device_as_workers_do():
    with torch.device("meta"):
        model = _model("resnet8", (1, 28, 28))

    assert all(p.is_meta for p in model.parameters())


FITS = {
    (1, 28, 28): {"lenet", "resnet8", "mlp"},
    (3, 28, 28): {"lenet", "resnet8", "mlp"},
    (1, 8, 8): {"small-cnn", "resnet8", "mlp"},
    (3, 32, 32): {"resnet8", "mlp"},
    (1, 40): {"cnn1d", "mlp"},
    (1, 7, 7): {"mlp"},
    (1, 2): {"mlp"},  # too short for cnn1d's three stride-2 convolutions
    (20,): {"mlp"},
}
OURS = {"lenet", "cnn1d", "resnet8", "small-cnn", "mlp"}


@pytest.mark.parametrize("shape", list(FITS))
def test_fits_predicates(shape):
    # Only this file's models: others (e.g. convex ones) may fit every shape too.
    fitting = {name for name in OURS if MODELS[name].fits(shape)}

    assert fitting == FITS[shape]


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("lenet", (1, 40)),
        ("cnn1d", (1, 28, 28)),
        ("small-cnn", (1, 28, 28)),
        ("resnet8", (1, 7, 7)),
    ],
)
def test_shape_mismatch_names_the_models_that_fit(name, shape):
    with pytest.raises(ValueError, match=f"model '{name}' expects") as err:
        check_model_fits(name, shape)

    message = str(err.value)
    assert str(shape) in message
    named = set(message.split("models that fit: ")[1].split(", "))
    assert named & OURS == FITS[shape]


def test_build_model_refuses_a_mismatched_store_shape():
    with pytest.raises(ValueError, match=r"models that fit: .*cnn1d"):
        build_model(ModelSpec(name="lenet", sample_shape=(1, 40), num_classes=10))
