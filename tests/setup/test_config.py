"""RunConfig: validation naming the flag, TOML reading, precedence, config.toml round trip."""

from __future__ import annotations

import dataclasses

import pytest

from dask_dane.pipeline.plan import plan_run
from dask_dane.pipeline.setup.config import RunConfig, read_toml, to_toml


def test_defaults_are_valid():
    config = RunConfig()

    assert config.validate() is config


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("rounds", 0, "--rounds"),
        ("rounds", -3, "--rounds"),
        ("workers", 0, "--workers"),
        ("local_steps", 0, "--local-steps"),
        ("batch_size", 0, "--batch-size"),
        ("eta", 0.0, "--eta"),
        ("eta", -0.5, "--eta"),
        ("eta", float("nan"), "--eta"),
        ("mu", -0.1, "--mu"),
        ("mu", float("inf"), "--mu"),
        ("local_lr", 0.0, "--local-lr"),
        ("local_lr", -1.0, "--local-lr"),
        ("algorithm", "newton", "--algorithm"),
        ("dtype", "float16", "--dtype"),
        ("device", "tpu", "--device"),
        ("local_optimizer", "rmsprop", "--local-optimizer"),
        ("local_solver", "newton", "--local-solver"),
        ("rho", 0.0, "--rho"),
        ("safeguard", "sometimes", "--safeguard"),
        ("l2", -0.01, "--l2"),
        ("timeout", 0.0, "--timeout"),
        ("momentum", 1.0, "--local-momentum"),
        ("server_momentum", -0.1, "--server-momentum"),
        ("trust_radius", -1.0, "--trust-radius"),
        ("line_search", -2, "--line-search"),
        ("eval_every", 0, "--eval-every"),
        ("threads_per_worker", 0, "--threads-per-worker"),
        ("lr_schedule", "linear", "--local-lr-schedule"),
    ],
)
def test_validate_rejects_bad_value_naming_the_flag(field, value, flag):
    config = RunConfig(**{field: value})

    with pytest.raises(ValueError, match=flag) as raised:
        config.validate()

    assert str(value) in str(raised.value) or repr(value) in str(raised.value)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"algorithm": "fedavg", "grad_sample": 100}, "--grad-sample 100 applies to --algorithm"),
        ({"algorithm": "sgd", "safeguard": "backtrack"}, "--safeguard backtrack applies to"),
        ({"tls_ca_file": "ca.pem"}, "secure a connection to --scheduler"),
        ({"algorithm": "sdane", "mu": 0.0}, "sdane needs --mu above 0"),
    ],
)
def test_settings_that_do_not_go_together_are_refused_with_the_fix(settings, message):
    with pytest.raises(ValueError, match=message):
        RunConfig(**settings).validate()


def test_validate_accepts_boundary_values():
    config = RunConfig(rounds=1, workers=1, local_steps=1, batch_size=1, mu=0.0, eta=1e-9)

    assert config.validate() == config


def _write(tmp_path, text: str):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def test_read_toml_reads_a_boolean_setting(tmp_path):
    path = _write(tmp_path, "server-nesterov = true\n")

    assert read_toml(path) == {"server_nesterov": True}


def test_read_toml_converts_dashes_and_ints_for_floats(tmp_path):
    path = _write(tmp_path, 'local-lr = 1\nrounds = 4\nalgorithm = "fedavg"\n')

    settings = read_toml(path)

    assert settings == {"local_lr": 1.0, "rounds": 4, "algorithm": "fedavg"}
    assert isinstance(settings["local_lr"], float)


def test_read_toml_reads_a_train_table(tmp_path):
    path = _write(tmp_path, "[train]\nrounds = 3\nmu = 0.5\n")

    assert read_toml(path) == {"rounds": 3, "mu": 0.5}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("local_rl = 0.1", "unknown key 'local_rl'; did you mean 'local_lr'?"),
        ("lokal-momentum = 0.5", "unknown key 'lokal-momentum'; did you mean 'local_momentum'?"),
        ("learning_rate = 0.1", "unknown key 'learning_rate'; every key is a `dane train` flag"),
    ],
)
def test_read_toml_rejects_unknown_key_naming_it_and_where_the_keys_are(tmp_path, line, message):
    path = _write(tmp_path, f"rounds = 3\n{line}\n")

    with pytest.raises(ValueError) as raised:
        read_toml(path)

    text = str(raised.value)
    assert message in text and "\n" not in text
    assert "`dane options` lists them all, as does docs/reference/settings.md" in text


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('rounds = "ten"', "rounds"),
        ("rounds = 2.5", "rounds"),
        ("rounds = true", "rounds"),
        ('eta = "1.0"', "eta"),
        ("model = 3", "model"),
        ("server_nesterov = 1", "server_nesterov"),  # a bool setting takes true or false
        ('server_nesterov = "yes"', "server_nesterov"),
    ],
)
def test_read_toml_rejects_wrong_type_naming_the_key(tmp_path, line, key):
    path = _write(tmp_path, line + "\n")

    with pytest.raises(ValueError, match=rf"key '{key}' must be"):
        read_toml(path)


def test_read_toml_missing_file_and_bad_syntax_are_value_errors(tmp_path):
    with pytest.raises(ValueError, match=r"does not exist.*--config"):
        read_toml(tmp_path / "absent.toml")
    with pytest.raises(ValueError, match="not valid TOML"):
        read_toml(_write(tmp_path, "rounds = = 3\n"))


def test_plan_precedence_defaults_file_flags(tmp_path):
    path = _write(tmp_path, "rounds = 7\neta = 0.25\nlocal_steps = 11\nseed = 9\n")
    flags = {"rounds": 9, "mu": None, "local_steps": None, "algorithm": "fedavg", "store": "s"}

    config = plan_run(flags, file=path)

    assert config.rounds == 9  # flag beats file
    assert config.eta == 0.25  # file beats default
    assert config.local_steps == 11  # file beats default; a flag of None was not given
    assert config.mu == RunConfig().mu  # default; a flag of None was not given
    assert config.seed == 9  # file only
    assert config.algorithm == "fedavg"  # flag only
    assert config.workers == RunConfig().workers  # default


def test_plan_precedence_saved_run_file_flags(tmp_path):
    """On --resume the run directory's saved settings are the bottom layer: the file's
    values beat them, and the flags beat the file."""
    out = tmp_path / "run"
    out.mkdir()
    saved = RunConfig(store="s", out=str(out), rounds=5, mu=0.1, seed=9, local_lr=0.05)
    (out / "config.toml").write_text(to_toml(saved))
    path = _write(tmp_path, "rounds = 7\nlocal_lr = 0.02\n")

    config = plan_run({"out": str(out), "rounds": 9, "mu": None}, file=path, resume=True)

    assert config.rounds == 9  # flag beats file and saved run
    assert config.local_lr == 0.02  # file beats saved run
    assert config.mu == 0.1  # saved run beats default; a flag of None was not given
    assert config.seed == 9  # saved run only
    assert config.workers == RunConfig().workers  # default


def test_plan_validates_the_result(tmp_path):
    path = _write(tmp_path, "rounds = 0\n")

    with pytest.raises(ValueError, match="--rounds"):
        plan_run({"store": "s"}, file=path)
    # A flag can repair a bad file value.
    assert plan_run({"store": "s", "rounds": 2}, file=path).rounds == 2


@pytest.mark.parametrize(
    "config",
    [
        RunConfig(),
        RunConfig(
            store='data/my "quoted" store\\x.zarr',
            out="runs/dane-mu0.1",
            algorithm="sgd",
            workers=4,
            rounds=3,
            eta=0.75,
            mu=1e-5,
            local_lr=1,
            dtype="float64",
            scheduler="tcp://10.0.0.1:8786",
            timeout=5,
        ),
    ],
    ids=["defaults", "everything-set"],
)
def test_to_toml_reads_back_to_the_same_config(tmp_path, config):
    path = _write(tmp_path, to_toml(config))

    settings = read_toml(path)
    restored = RunConfig(**settings)

    assert restored == config
    # None values are left out, everything else is written.
    assert set(settings) == {k for k, v in dataclasses.asdict(config).items() if v is not None}


def test_config_toml_has_one_table_per_section_and_flat_files_read_the_same(tmp_path):
    config = RunConfig(algorithm="fedprox", mu=0.25, workers=3, rounds=7, model="mlp")
    sectioned = _write(tmp_path, to_toml(config))
    flat = tmp_path / "flat.toml"
    flat.write_text('algorithm = "fedprox"\nmu = 0.25\nworkers = 3\nrounds = 7\nmodel = "mlp"\n')

    text = sectioned.read_text()

    for table in ("[data]", "[model]", "[algorithm]", "[cluster]", "[run]"):
        assert table in text
    assert text.index("mu = 0.25") > text.index("[algorithm]") > text.index("[model]")
    assert RunConfig(**read_toml(sectioned)) == config
    assert RunConfig(**read_toml(flat)) == config


def test_a_key_in_the_wrong_section_is_refused_naming_its_section(tmp_path):
    path = _write(tmp_path, "[cluster]\neta = 0.5\n")

    with pytest.raises(ValueError, match=r"'eta' belongs in \[algorithm\], not \[cluster\]"):
        read_toml(path)
