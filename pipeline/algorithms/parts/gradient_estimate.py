"""How DANE's first step estimates f_i and g_i at w, and the correction it builds on them.

Legend: w = weights at the start of round t, g_i = shard i's gradient at w, g = mean_i g_i.
- full (the paper's, the default): f_i and g_i on the whole shard;
- sampled: `grad_sample` = N rows of each shard, fixed for the whole run (chosen once from
  the run's `seed`): the same "fixed large sample" every round, never a different
  minibatch. `grad_sample_growth` = G > 1 makes it N * G^(t-1) rows in round t (the first
  rows of the same fixed order, up to the whole shard): a cheap gradient while the weights
  move a lot, an exact one near the end;
- local (`grad_sample_local` = F > 0): the first F K_t B rows of the same fixed order in
  round t, F times the rows the round's K_t local steps of batch B draw (at least B, at most
  the shard): a round of few local steps keeps its gradient phase as cheap as its solve,
  which a fixed N-row sample does not when K B is well below N;
- shrunk (`correction` = "shrink"): the shard's part of the correction, g_i - g, scaled by
  the positive-part James-Stein factor of its sampling noise (correction.py), reported per
  shard as `correction_factor`. It is 1 wherever the gradient is the whole shard's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...engine.protocol import LocalContext, LocalOutput, validate
from . import correction as cr
from . import noise_scale as ns
from .checks import at_least, non_negative, one_of
from .hyperparameters import declare, part
from .setting_error import SettingError, setting

if TYPE_CHECKING:
    import torch

    from ...engine.protocol import Objective


@dataclass(frozen=True, kw_only=True)
class GradientEstimate:
    grad_sample: int = cr.GRAD_SAMPLE.field()  # rows of f_i, g_i; 0: all
    grad_sample_growth: float = declare(
        1.0,
        at_least(1.0),
        exclusive=True,
        help="DANE: grow the gradient sample by this per round.",
    )
    grad_sample_local: float = declare(
        0.0,
        non_negative,
        exclusive=True,
        help="DANE: the gradient sample as this times the round's local rows K_t B; 0: off.",
    )
    correction: str = declare(
        "plain",
        one_of(*cr.CORRECTIONS),
        exclusive=True,
        help="DANE: plain | shrink (scale g_i - g by its sampled signal-to-noise).",
    )
    seed: int = 0  # the run's seed: which rows grad_sample takes

    def __post_init__(self) -> None:
        validate(self)
        if self.grad_sample_local and self.grad_sample:
            raise SettingError(
                f"{setting('grad_sample_local')} sizes the gradient sample by the round's "
                f"local rows and {setting('grad_sample')} fixes it; give one of them"
            )
        if self.grad_sample_growth != 1.0 and not self.grad_sample:
            raise SettingError(
                f"{setting('grad_sample_growth')} grows the gradient sample from "
                f"{setting('grad_sample', 'N')} rows; pass {setting('grad_sample', 'N')} as well"
            )

    def rows(
        self, objective: Objective, round_index: int, local: tuple[int, int] = (0, 1)
    ) -> Objective:
        """The shard, or its sample for round `round_index`: grad_sample rows, times
        grad_sample_growth per round since the first; or grad_sample_local times the round's
        local rows, `local` = (K_t, B): F K_t B rows, at least B."""
        if self.grad_sample_local:
            steps, batch = local
            size = max(round(self.grad_sample_local * steps * batch), batch)
            return objective.fixed_sample(size, self.seed)
        if not self.grad_sample:
            return objective
        size = round(self.grad_sample * self.grad_sample_growth ** (round_index - 1))
        return objective.fixed_sample(size, self.seed)

    def local_gradient(self, ctx: LocalContext, local: tuple[int, int] = (0, 1)) -> LocalOutput:
        """f_i and g_i on the shard or its sample (with shrink: and their variance, kept);
        `local`: the round's (K_t, B), for grad_sample_local."""
        import torch

        sampled = self.rows(ctx.objective, ctx.round_index, local)
        rows, kept = sampled.num_samples, {}
        if self.correction == "shrink":
            shard_rows = ctx.objective.num_samples
            loss, g_i, variance = cr.sampling_variance(sampled, shard_rows, ctx.weights)
            metrics = {"train_loss": loss, **cr.noise_metrics(variance, rows, shard_rows)}
            kept = {"variance": torch.tensor(variance, dtype=torch.float64)}
        else:
            loss, g_i = sampled.loss_and_grad(ctx.weights)
            metrics = {"train_loss": loss}
        if self.grad_sample or self.grad_sample_local:  # a sample of the shard, not all of it
            metrics["grad_rows"] = float(rows)
        # For the round's gradient noise scale (noise_scale.py), at no extra pass.
        metrics |= ns.shard_metrics(g_i, rows, ctx.objective.num_samples)
        return LocalOutput(tensors={"grad": g_i}, metrics=metrics, rows=rows, kept=kept)

    def noise(self, mean: LocalOutput) -> dict[str, torch.Tensor]:
        """What the broadcast adds for shrink: [Var(g), n] to every shard (else nothing)."""
        if cr.NOISE_ROWS not in mean.metrics:
            return {}
        return {cr.NOISE: cr.mean_noise(mean.metrics, mean.rows)}

    def linear(
        self, ctx: LocalContext, g: torch.Tensor, eta: float
    ) -> tuple[torch.Tensor, float | None]:
        """The local problem's linear term g_i - eta*g, or its shrunk form and the factor."""
        assert ctx.previous is not None, "the correction needs the shard's own gradient"
        own = ctx.previous.tensors["grad"]
        if self.correction != "shrink":
            return own - eta * g, None
        variance = float(ctx.previous.kept["variance"])
        shard_rows = ctx.objective.num_samples
        factor = cr.shrink_factor(own, g, variance, shard_rows, ctx.received[cr.NOISE])
        return cr.shrunk_linear(own, g, eta, factor), factor


# The metadata of the field DANE takes its gradient estimate in (built from the settings).
GRADIENT_PART = part(GradientEstimate)
